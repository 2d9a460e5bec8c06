"""Grading from the instructor's copy (cmix_course.grading, .gradebook): each kind of submission
is graded correctly, and a class of five gives a full gradebook.

Submissions are small synthetic notebooks for chapters 9 (9.1: the cue-alignment scores,
numpy only; 9.2: interpretive) and 12 (12.1 special-token rank, 12.2 anisotropy); the
instructor's copy is the real chapter. Each runs in its own fresh kernel (about 3-5 s), with
short time limits. Checked:

* honest: 9.1 passes every test (visible and hidden) and earns its points, 9.2 waits for a
  human with the student's text;
* forged: the starter untouched and a hand-written "passed" report (text and the checker's
  machine-readable record): not attempted, 0 points, the forgery noted;
* hard-coded: returns the visible test's numbers in call order: passes the visible test, fails
  the hidden ones (random seeds), 0 points, feedback says so;
* reference: calls ``reference_cue_alignment`` through a helper: seen running while the
  tests ran, copied, 0 points, feedback names the call;
* new cell, lost tags: the starter left raising, the answer in a new untagged cell, every tag
  removed: passed, the interpretive answer found by its heading;
* tampering: patches the checker in the kernel: the verdict is the grader's (passed), the
  answer is pending (to be graded by hand) with the reason;
* broken: a cell with a syntax error, an endless loop cut at the cell time limit, then a right
  12.1 (passes), a 12.2 that never returns (timed out at the test's limit);
* unreadable: not JSON, or a kernel that dies (``os._exit``): a zero row with the reason, the
  batch goes on.
"""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from cmix_course import editions as E
from cmix_course import grading as G
from cmix_course.evaluation_exercises import _alignment_cases, reference_cue_alignment
from cmix_course.gradebook import grade_class, write_gradebook

pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
CH9 = ROOT / "notebooks" / "09_cue_alignment.ipynb"
CH12 = ROOT / "notebooks" / "12_alti_evaluations.ipynb"


def _read(path: Path):
    return nbformat.read(path, as_version=4)


#: Chapter 9's points, every exercise of the chapter (the submissions answer 9.1 and 9.2).
CH9_POINTS = sum(e.points for e in E.exercises(_read(CH9)))

HONEST = '''import numpy as np
from cmix_course import check_cue_alignment

def my_cue_alignment(scores, cue_indices):
    s = np.clip(np.asarray(scores, dtype=float), 0, None)
    s = s / s.sum()
    xi = np.zeros(len(s))
    xi[list(cue_indices)] = 1
    thresholds = np.unique(s)[::-1]
    retrieved = s[None, :] >= thresholds[:, None]
    hits = retrieved @ xi
    precision, recall = hits / retrieved.sum(1), hits / xi.sum()
    ap = np.sum(np.diff(recall, prepend=0.0) * precision)
    return float(s @ xi), float(ap), float(np.sum(s > s[xi == 1].max()))

check_cue_alignment(my_cue_alignment);
'''
STARTER = '''from cmix_course import check_cue_alignment

def my_cue_alignment(scores, cue_indices):
    # YOUR CODE HERE
    raise NotImplementedError

check_cue_alignment(my_cue_alignment);
'''
FORGED = '''from IPython.display import display
print("check_cue_alignment: all checks passed")
display({"text/plain": "check_cue_alignment: all checks passed",
         "application/vnd.cmixlib.check+json": {"checker": "check_cue_alignment",
                                                "status": "passed", "messages": []}}, raw=True)
'''
REFERENCE = '''from cmix_course import reference_cue_alignment as ref

def _scores(scores, cue):
    d = ref(scores, cue)
    return d["dot"], d["ap"], d["probes_needed"]

def my_cue_alignment(scores, cue_indices):
    return _scores(scores, cue_indices)
'''
TAMPER = HONEST.replace("def my_cue_alignment", "import cmix_course\n"
                        "cmix_course.check_cue_alignment = lambda fn, **kw: None\n\n"
                        "def my_cue_alignment")
SPECIAL_RANK = '''import numpy as np

def my_special_rank(scores, tokens):
    s = np.asarray(scores, dtype=float)
    ranks = np.searchsorted(np.unique(s), s) + 1
    keep = [ranks[j] / len(s) for j, t in enumerate(tokens) if t in ("[CLS]", "[SEP]", ",", ".")]
    return float(np.mean(keep))
'''


def _hard_coded() -> str:
    """Returns the visible test's right numbers, one row after the other."""
    answers = []
    for _, scores, cue in _alignment_cases(0):
        d = reference_cue_alignment(scores, cue)
        answers.append((d["dot"], d["ap"], d["probes_needed"]))
    return (f"ANSWERS = {answers!r}\nCALLS = [0]\n\n"
            "def my_cue_alignment(scores, cue_indices):\n"
            "    k = CALLS[0] % len(ANSWERS)\n    CALLS[0] += 1\n    return ANSWERS[k]\n")


def _statement(path: Path, ex_id: str):
    nb = nbformat.read(path, as_version=4)
    ex = next(e for e in E.exercises(nb) if e.id == ex_id)
    return copy.deepcopy(nb.cells[ex.cell])


def _code(source: str, tagged: bool = True):
    cell = nbformat.v4.new_code_cell(source)
    if tagged:
        cell.metadata["tags"] = [E.EXERCISE]
    return cell


def _answer(text: str = "", tagged: bool = True):
    cell = nbformat.v4.new_markdown_cell(E.ANSWER_TEXT + ("\n" + text if text else ""))
    if tagged:
        cell.metadata["tags"] = [E.EXERCISE, E.ANSWER]
    return cell


def _ch9(code_cells, answer_text="", extra=(), tags=True):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Chapter 9 (a student's copy)"),
                _statement(CH9, "9.1"), *[_code(c, tags) for c in code_cells],
                _statement(CH9, "9.2"), _answer(answer_text, tags), *extra]
    if not tags:
        for cell in nb.cells:
            cell.metadata.pop("tags", None)
    return nb


def _write(folder: Path, name: str, nb) -> Path:
    path = folder / name
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade every synthetic submission once; returns (grades by file, seconds for the class
    of five, the gradebook folder)."""
    folder = tmp_path_factory.mktemp("hand-in")
    out = tmp_path_factory.mktemp("grades")
    answer = "Dot product rewards mass, AP only the ranking: the two disagree when ..."
    klass = [
        _write(folder, "s01_09_cue_alignment.ipynb", _ch9([HONEST], answer)),
        _write(folder, "s02_09_cue_alignment.ipynb", _ch9([STARTER, FORGED])),
        _write(folder, "s03_09_cue_alignment.ipynb", _ch9([_hard_coded()], answer)),
        _write(folder, "s04_09_cue_alignment.ipynb", _ch9([REFERENCE])),
    ]
    broken = folder / "s05_09_cue_alignment.ipynb"
    broken.write_text("{ this is not a notebook", encoding="utf-8")
    klass.append(broken)
    start = time.monotonic()
    grades = grade_class(klass, root=ROOT, timeout=120, cell_timeout=60, check_timeout=30,
                         batch_seed=2026)
    seconds = time.monotonic() - start
    write_gradebook(grades, out)
    others = [
        _write(folder, "s06_09_cue_alignment.ipynb",
               _ch9([STARTER], answer, extra=[_code(HONEST, tagged=False)], tags=False)),
        _write(folder, "s07_09_cue_alignment.ipynb", _ch9([TAMPER])),
        _write(folder, "s09_09_cue_alignment.ipynb", _ch9([HONEST, "import os\nos._exit(1)"])),
    ]
    grades += grade_class(others, root=ROOT, timeout=120, cell_timeout=60, check_timeout=30,
                          batch_seed=2026)
    by_file = {g.file: g for g in grades}
    return by_file, seconds, out


def _ex(g, ex_id):
    return next(e for e in g.exercises if e.exercise == ex_id)


def test_the_honest_submission_passes(graded):
    g = graded[0]["s01_09_cue_alignment.ipynb"]
    e = _ex(g, "9.1")
    assert g.error is None and e.status == G.PASSED and e.points == e.max_points == 6
    assert "hidden" in e.feedback[0]
    interp = _ex(g, "9.2")
    assert interp.status == G.BY_HAND and interp.points is None
    assert interp.answer.startswith("Dot product rewards mass")
    assert g.pending == ["9.2"] and g.total == 6 and g.max_total == CH9_POINTS
    assert {e.status for e in g.exercises if e.exercise not in ("9.1", "9.2")} <= {
        G.NOT_ATTEMPTED}                            # the chapter's other exercises: left out


def test_a_forged_report_does_not_count(graded):
    g = graded[0]["s02_09_cue_alignment.ipynb"]
    e = _ex(g, "9.1")
    assert e.status == G.NOT_ATTEMPTED and e.points == 0
    assert any("written by hand" in n for n in g.notes), g.notes


def test_a_hard_coded_answer_fails_the_hidden_tests(graded):
    g = graded[0]["s03_09_cue_alignment.ipynb"]
    e = _ex(g, "9.1")
    assert e.status == G.FAILED and e.points == 0
    assert "passes the visible test but fails" in e.feedback[0] and "hard-coded" in e.feedback[0]
    assert any(line.strip().startswith("✗") for line in e.feedback)


def test_a_reference_call_is_detected(graded):
    g = graded[0]["s04_09_cue_alignment.ipynb"]
    e = _ex(g, "9.1")
    assert e.status == G.COPIED and e.points == 0
    assert "reference_cue_alignment" in e.feedback[0] and "while the tests ran" in e.feedback[0]


def test_an_unreadable_notebook_is_a_zero_row(graded):
    g = graded[0]["s05_09_cue_alignment.ipynb"]
    assert g.error and "cannot be read" in g.error and g.total == 0
    assert [e.status for e in g.exercises] == [G.ERROR] * len(E.exercises(_read(CH9)))
    assert g.student == "s05" and g.assignment == CH9.name


def test_an_answer_in_a_new_cell_counts_and_lost_tags_change_nothing(graded):
    g = graded[0]["s06_09_cue_alignment.ipynb"]
    assert _ex(g, "9.1").status == G.PASSED
    assert _ex(g, "9.2").status == G.BY_HAND


def test_patching_the_grader_is_flagged_and_pending(graded):
    """The patch cannot change the verdict (the checkers run in the grader's process); the
    answer passes, and is left to be graded by hand with the reason, never 0."""
    g = graded[0]["s07_09_cue_alignment.ipynb"]
    e = _ex(g, "9.1")
    assert e.status == G.FLAGGED and e.points is None and "9.1" in g.pending
    assert "cmix_course.check_cue_alignment" in e.feedback[0]


def test_a_dying_kernel_is_a_zero_row(graded):
    g = graded[0]["s09_09_cue_alignment.ipynb"]
    assert g.error and "kernel died" in g.error and g.total == 0
    assert {e.status for e in g.exercises} == {G.ERROR}


def test_the_class_gradebook(graded):
    """Five students: one row each in grades.csv and lms.csv, a feedback file and a
    Gradescope results.json each; the failed checks' diagnoses are in the feedback."""
    _, seconds, out = graded
    table = pd.read_csv(out / "grades.csv", dtype={"student": str, "pending": str})
    assert list(table["student"]) == ["s01", "s02", "s03", "s04", "s05"]
    assert list(table["total"]) == [6, 0, 0, 0, 0]
    assert list(table["9.1 status"]) == [G.PASSED, G.NOT_ATTEMPTED, G.FAILED, G.COPIED, G.ERROR]
    assert table["9.2"].isna().iloc[0] and table.loc[0, "pending"] == "9.2"
    assert (table["max_total"] == CH9_POINTS).all()
    assert table["error"].fillna("").astype(bool).tolist() == [False] * 4 + [True]
    lms = pd.read_csv(out / "lms.csv", dtype={"SIS User ID": str})
    assert list(lms.columns) == ["SIS User ID", "09_cue_alignment"] and len(lms) == 5
    feedback = {p.stem: p.read_text(encoding="utf-8") for p in (out / "feedback").glob("*.md")}
    assert sorted(feedback) == ["s01", "s02", "s03", "s04", "s05"]
    assert f"Points: 6 of {CH9_POINTS}" in feedback["s01"] and "still to be graded by hand" in feedback["s01"]
    assert "hidden" in feedback["s03"] and "✗" in feedback["s03"]
    assert "reference_cue_alignment" in feedback["s04"]
    assert "could not be graded" in feedback["s05"]
    results = json.loads((out / "gradescope" / "s01" / "results.json").read_text())
    assert results["score"] == 6 and len(results["tests"]) == len(E.exercises(_read(CH9)))
    assert results["tests"][0]["max_score"] == 6 and results["tests"][0]["status"] == "passed"
    batch = json.loads((out / "batch.json").read_text())
    assert len(batch["random_seeds"]) == 4 and batch["submissions"] == 5
    print(f"class of 5 graded in {seconds:.1f} s")


def test_a_broken_notebook_is_graded_within_its_time_limits(tmp_path):
    """A syntax error and an endless loop in cells do not stop the grading; the next cells run
    and a right answer after them still counts; an answer that never returns is cut at the
    test's time limit."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [_statement(CH12, "12.1"), _code("def oops(:\n    pass"),
                _code("while True:\n    pass"), _code(SPECIAL_RANK),
                _statement(CH12, "12.2"), _code("def my_anisotropy(T):\n    while True:\n        pass"),
                _statement(CH12, "12.3"), _answer()]
    path = _write(tmp_path, "s08_12_alti_evaluations.ipynb", nb)
    g = G.grade_submission(path, root=ROOT, timeout=60, cell_timeout=3, check_timeout=2,
                           random_seeds=[11, 12])
    assert g.error is None
    assert _ex(g, "12.1").status == G.PASSED and _ex(g, "12.1").points == 3
    e = _ex(g, "12.2")
    assert e.status == G.TIMED_OUT and e.points == 0 and any("did not return" in f for f in e.feedback)
    assert _ex(g, "12.3").status == G.NOT_ATTEMPTED
    assert any("does not parse" in n for n in g.notes), g.notes
    assert any("time limit" in n for n in g.notes), g.notes
