"""The gradebook a course runs on (no kernel: the grades are built directly): a class of ten
with a duplicate id, hand grades that survive a regrade and reach every export, pending
items in Gradescope, the likely cause kept in long reports, interpretive answers under the
student's own headings, and what a sandboxed kernel can see."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pandas as pd

from cmix_course import grading as G
from cmix_course.gradebook import HAND_GRADES, write_gradebook
from cmix_course.grading import BY_HAND, FLAGGED, PASSED, ExerciseGrade, SubmissionGrade

ROOT = Path(__file__).resolve().parents[1]
A = "03_attention_rollout_flow.ipynb"


def _grade(student: str, passed: bool = True, file: str | None = None) -> SubmissionGrade:
    g = SubmissionGrade(student, file or f"{student}_{A}", A)
    g.exercises = [
        ExerciseGrade("3.1", "computational", "rollout", 4, PASSED if passed else FLAGGED,
                      4.0 if passed else None, ["passed" if passed else "to be graded by hand"]),
        ExerciseGrade("3.2", "interpretive", "why", 5, BY_HAND, None, ["by hand"], answer="text"),
    ]
    return g


def _class_of_ten() -> list[SubmissionGrade]:
    grades = [_grade(f"s{k:02d}", passed=k != 4) for k in range(9)]
    failed = grades[5].exercises[0]                     # s05: a failed answer, partial credit
    failed.status, failed.points = G.FAILED, 0.0
    failed.feedback = ["visible test: failed", "  · likely cause: the map is transposed"]
    grades.append(_grade("s03", file=f"s03-again_{A}"))          # a duplicate id
    return grades


def test_a_class_of_ten_with_a_duplicate_id(tmp_path):
    write_gradebook(_class_of_ten(), tmp_path)
    table = pd.read_csv(tmp_path / "grades.csv", keep_default_na=False)
    assert len(table) == 10
    dup = table[table.student == "s03"]
    assert len(dup) == 2 and all("2 submissions have the id 's03'" in e for e in dup.error)
    assert (table[table.student != "s03"].error == "").all()
    lms = pd.read_csv(tmp_path / "lms.csv")
    assert lms[lms["SIS User ID"] == "s03"].iloc[:, 1].isna().all()      # no silent total
    # the flagged answer is pending, never 0
    s04 = table[table.student == "s04"].iloc[0]
    assert s04["3.1"] == "" and "3.1" in s04["pending"].split()


def test_hand_grades_survive_a_regrade_and_reach_every_export(tmp_path):
    write_gradebook(_class_of_ten(), tmp_path)
    hand = pd.read_csv(tmp_path / HAND_GRADES, dtype=str, keep_default_na=False)
    assert set(hand.exercise) == {"3.1", "3.2"} and (hand.points == "").all()
    assert len(hand) == 10 + 1 + 1            # every 3.2, the flagged 3.1, the failed 3.1
    hand.loc[(hand.student == "s01") & (hand.exercise == "3.2"), ["points", "comment"]] = ["4", "good"]
    hand.loc[(hand.student == "s04") & (hand.exercise == "3.1"), "points"] = "3"
    hand.to_csv(tmp_path / HAND_GRADES, index=False)
    write_gradebook(_class_of_ten(), tmp_path)                           # the regrade
    again = pd.read_csv(tmp_path / HAND_GRADES, dtype=str, keep_default_na=False)
    assert len(again) == len(hand)
    assert again.set_index(["student", "exercise"]).loc[("s01", "3.2"), "points"] == "4"
    table = pd.read_csv(tmp_path / "grades.csv", keep_default_na=False).set_index("student")
    assert float(table.loc["s01", "3.2"]) == 4 and float(table.loc["s01", "total"]) == 8
    assert float(table.loc["s04", "3.1"]) == 3 and "3.1" not in table.loc["s04", "pending"]
    lms = pd.read_csv(tmp_path / "lms.csv").set_index("SIS User ID")
    assert lms.loc["s01"].iloc[0] == 8
    gs = json.loads((tmp_path / "gradescope" / "s01" / "results.json").read_text())
    assert gs["score"] == 8 and gs["tests"][1]["score"] == 4
    s05 = again[(again.student == "s05") & (again.exercise == "3.1")].iloc[0]
    assert "transposed" in s05.reason and s05.points == "" and float(table.loc["s05", "3.1"]) == 0
    assert "graded by hand: 4 / 5 (good)" in (tmp_path / "feedback" / "s01.md").read_text()


def test_gradescope_marks_hand_graded_items_pending(tmp_path):
    write_gradebook([_grade("s01")], tmp_path)
    gs = json.loads((tmp_path / "gradescope" / "s01" / "results.json").read_text())
    pending = gs["tests"][1]
    assert "status" not in pending and "score" not in pending and "pending" in pending["name"]
    assert gs["tests"][0]["status"] == "passed"


def test_the_likely_cause_is_kept_however_long_the_report():
    msgs = ["✓ shape"] + [f"  · layer 0, i={k}: yours 0.1, expected 0.2" for k in range(30)]
    msgs += ["✗ 30 of 36 entries differ", "  · likely cause: the map is transposed"]
    lines = G._report_lines(msgs)
    assert any("likely cause: the map is transposed" in line for line in lines)
    assert len(lines) <= 11


def test_interpretive_answers_under_the_students_own_headings():
    student = nbformat.read(ROOT / "editions" / "student" / A, as_version=4)
    _, found, known = G.load_assignment(ROOT / "notebooks" / A)
    ex = next(e for e in found if e.kind == "interpretive")
    k = next(i for i, c in enumerate(student.cells) if "answer" in c.metadata.get("tags", []))
    student.cells[k].source = "### My answer\n\nThe rows become alike because ..."
    student.cells.insert(k + 1, nbformat.v4.new_markdown_cell("## Part 2\n\nAnd the flow ..."))
    text = G.interpretive_answer(student, ex, known)
    assert "### My answer" in text and "## Part 2" in text and "flow" in text
    assert "Exercise" not in text
    assert G.interpretive_answer(nbformat.read(ROOT / "editions" / "student" / A, 4), ex, known) == ""


def test_the_sandboxed_kernel_sees_no_repository_and_no_grader_file():
    from cmix_course.sandbox import Kernel, make_sandbox, new_root

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        f"import os, sys, json, cmixlib, cmix_course\nREPO = {str(ROOT)!r}\n"
        "def probe():\n"
        "    files = [os.path.join(d, f) for d, _, fs in os.walk('..') for f in fs]\n"
        "    repo = os.path.join(REPO, 'notebooks')\n"
        "    seen = os.listdir(repo) if os.path.isdir(repo) else []\n"
        "    return {'env': json.dumps(dict(os.environ)), 'lib': cmixlib.__file__, 'repo': seen,\n"
        "            'course': cmix_course.__file__, 'cwd': os.getcwd(), 'files': files}")]
    root = new_root()
    box = make_sandbox(root)
    kernel = Kernel(nb, box, timeout=120, cell_timeout=120)
    with kernel.start():
        kernel.run_notebook()
        cell = kernel._run("r = probe(); print(json.dumps({k: r[k] for k in ('lib', 'course', "
                           "'cwd', 'repo')})); print(r['env']); print(len([f for f in r['files'] "
                           "if f.endswith(('.json', '.ipynb', '.pt')) and not '/site/' in f]))", 60)
    text = "".join(o.get("text", "") for o in cell.outputs)
    lines = text.splitlines()
    where, env, n_suspect = json.loads(lines[0]), json.loads(lines[1]), int(lines[2])
    assert where["lib"].startswith(str(root)) and where["course"].startswith(str(root))
    assert where["cwd"].startswith(str(root)) and not str(ROOT) in where["cwd"]
    assert n_suspect == 0                        # no spec, results file or notebook to read
    leaked = {k: v for k, v in env.items() if str(ROOT) in v and k != "PATH"}
    assert not leaked and "CMIX_CACHE" not in env
    assert env["PYTHONPATH"] == str(box.site)
    if kernel.mode == "namespace":               # unshare works here: the repository is hidden
        assert where["repo"] == []
    else:
        assert where["repo"]                     # local mode: readable (documented)
    assert (ROOT / "notebooks").is_dir() and any((ROOT / "notebooks").iterdir())
    import shutil

    shutil.rmtree(root, ignore_errors=True)
