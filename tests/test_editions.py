"""Coursework editions: the exercise format of chapters 2-14, the student edition (no solutions,
up to date, runs with empty answers and reports every exercise as not attempted) and grading."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from cmixlib.exercises import editions as E
from cmixlib.exercises.grading import BY_HAND, NOT_RUN, grade

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = E.chapter_notebooks(ROOT)
STUDENT = ROOT / E.STUDENT_DIR


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def test_chapters_2_to_14_are_all_there():
    assert [E.chapter_number(p) for p in CHAPTERS] == list(E.EXERCISE_CHAPTERS)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_exercise_format(path):
    problems = E.check_notebook(_read(path), path)
    assert not problems, "\n".join(problems)


def test_the_validator_catches_a_broken_exercise():
    nb = _read(CHAPTERS[1])
    exs = E.exercises(nb, 3)
    comp = next(e for e in exs if e.kind == "computational")
    nb.cells[comp.cell + 2].metadata["tags"] = ["hide-input"]      # solution not tagged
    nb.cells[comp.cell + 1].source = nb.cells[comp.cell + 1].source.replace(
        E.STARTER_STUB, "return None")                                # starter changed
    problems = E.check_notebook(nb, CHAPTERS[1])
    assert any("starter code" in p for p in problems), problems
    assert any("then the solution" in p for p in problems), problems


def _cell_key(cell) -> tuple:
    return cell.cell_type, cell.source, tuple(cell.metadata.get("tags", []))


def test_committed_student_edition_is_up_to_date(tmp_path):
    """`make editions` was run after the last change to a chapter (Colab links point here)."""
    E.write_editions(ROOT, student_dir=tmp_path / "s", instructor_dir=tmp_path / "i")
    fresh = sorted((tmp_path / "s").glob("*.ipynb"))
    committed = sorted(STUDENT.glob("*.ipynb"))
    assert [p.name for p in committed] == [p.name for p in fresh], "run `make editions`"
    for new, old in zip(fresh, committed):
        assert [_cell_key(c) for c in _read(new).cells] == \
            [_cell_key(c) for c in _read(old).cells], f"{old.name} is stale: run `make editions`"


def _solution_lines(nb) -> set[str]:
    """Distinctive lines of every solution and grading cell (long enough not to be shared)."""
    lines = set()
    for cell in nb.cells:
        if E.tags(cell) & {E.SOLUTION, E.GRADING}:
            for line in cell.source.splitlines():
                line = line.strip()
                if len(line) >= 25 and not line.startswith(("from ", "import ", "check_")):
                    lines.add(line)
    return lines


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_student_edition_has_no_solutions(path):
    student = _read(STUDENT / path.name)
    text = "\n".join(c.source for c in student.cells)
    assert not any(E.tags(c) & {E.SOLUTION, E.GRADING} for c in student.cells)
    assert "# Solution" not in text and "Model answer" not in text
    assert E.GRADING_HEAD not in text
    assert not any(c.get("outputs") for c in student.cells if c.cell_type == "code")
    # nothing of a solution or a grading note survives, line by line
    body = {line.strip() for line in text.splitlines()}
    source = _read(path)
    shared = {line.strip() for c in source.cells if not E.tags(c) & {E.SOLUTION, E.GRADING}
              for line in c.source.splitlines()}   # e.g. the signature the starter also gives
    leaked = (_solution_lines(source) - shared) & body
    assert not leaked, sorted(leaked)[:5]
    n_ex = len(E.exercises(_read(path)))
    assert len(E.exercises(student)) == n_ex and n_ex >= 2


def test_instructor_edition_keeps_everything(tmp_path):
    src = _read(CHAPTERS[0])
    inst = E.instructor_edition(src, CHAPTERS[0].name)
    assert len(inst.cells) == len(src.cells) + 1
    assert inst.metadata["cmix"]["edition"] == "instructor"
    assert sum(E.GRADING in E.tags(c) for c in inst.cells) == len(E.exercises(src))


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name for p in CHAPTERS])
def test_student_edition_runs_with_empty_answers(name):
    """Top to bottom, quick mode: no error, every exercise reported as not attempted."""
    pytest.importorskip("nbclient")
    rows = grade(STUDENT / name, quick=True)
    assert not rows.attrs["errors"], rows.attrs["errors"]
    assert set(rows["status"]) == {"not attempted"}, rows[["exercise", "status"]]


def _mini_notebook(statement_cell, code: str):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [statement_cell, nbformat.v4.new_code_cell(code)]
    nb.cells[1].metadata["tags"] = [E.EXERCISE]
    return nb


@pytest.mark.slow
def test_grade_reports_passed_failed_and_not_attempted():
    nb = _read(CHAPTERS[1])   # chapter 3: rollout
    ex = next(e for e in E.exercises(nb) if e.checker == "check_rollout")
    stmt = nb.cells[ex.cell]
    right = """
import numpy as np
from cmixlib.exercises import check_rollout
def my_rollout(maps, add_identity):
    m = np.asarray(maps, dtype=float)
    if add_identity:
        m = m + np.eye(m.shape[-1]); m = m / m.sum(-1, keepdims=True)
    out = [m[0]]
    for l in range(1, len(m)):
        out.append(m[l] @ out[-1])
    return np.stack(out)
check_rollout(my_rollout)
"""
    wrong = right.replace("m[l] @ out[-1]", "out[-1] @ m[l]")
    empty = "from cmixlib.exercises import check_rollout\n" \
            "def my_rollout(maps, add_identity):\n    raise NotImplementedError\n" \
            "check_rollout(my_rollout)"
    got = {}
    for label, code in (("right", right), ("wrong", wrong), ("empty", empty)):
        rows = grade(_mini_notebook(stmt, code))
        got[label] = rows.iloc[0]
    assert got["right"]["status"] == "passed"
    assert got["wrong"]["status"] == "failed"
    assert "wrong order" in got["wrong"]["detail"]
    assert got["empty"]["status"] == "not attempted"
    crashed = grade(_mini_notebook(stmt, "raise RuntimeError('x')\ncheck_rollout(None)"))
    assert crashed.iloc[0]["status"] == NOT_RUN and crashed.attrs["errors"]


def test_grade_reads_an_interpretive_answer_without_executing():
    nb = _read(CHAPTERS[0])
    ex = next(e for e in E.exercises(nb) if e.kind == "interpretive")
    nb.cells[ex.cell + 1].source = E.ANSWER_TEXT + "\nThe residual dominates because ..."
    rows = grade(nb, execute_first=False).set_index("exercise")
    assert rows.loc[ex.id, "status"] == BY_HAND
    assert rows.loc[ex.id, "detail"].startswith("The residual dominates")


def test_cli_checks_the_format():
    run = subprocess.run([sys.executable, "-m", "cmixlib.cli", "editions", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert len(re.findall(r": OK \(", run.stdout)) == len(CHAPTERS)


def test_instructors_page_lists_every_chapter_and_exercise():
    from cmixlib.book import REPO_URL
    from cmixlib.exercises import course

    chapters = course.chapters(ROOT)
    assert list(chapters["chapter"]) == list(E.EXERCISE_CHAPTERS)
    assert all(len(o) >= 2 for o in chapters["objectives"])
    assert (chapters["minutes"] > 0).all()
    md = course.chapter_markdown(ROOT)
    for k in E.EXERCISE_CHAPTERS:
        assert f"### Chapter {k}: " in md
    for url, name in zip(chapters["colab"], chapters["file"]):
        repo = REPO_URL.removeprefix("https://github.com/")
        assert url.endswith(f"{repo}/blob/main/editions/student/{name}.ipynb")
        assert (STUDENT / f"{name}.ipynb").is_file()
    table = course.exercise_markdown(ROOT).splitlines()
    total = sum(len(E.exercises(_read(p))) for p in CHAPTERS)
    assert len(table) == 2 + total


def test_every_checker_is_tested_on_wrong_answers():
    """Each exported checker is called at least twice in the tests/test_exercises*.py files: on
    the solution and on wrong answers (often a loop over several; those tests assert each
    answer's message)."""
    from cmixlib import exercises

    texts = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_exercises*.py"))
    for name in (n for n in exercises.__all__ if n.startswith("check_")):
        calls = len(re.findall(rf"\b{name}\(", texts))
        assert calls >= 2, f"{name}: {calls} calls in the exercise tests"
    used = {e.checker for p in CHAPTERS for e in E.exercises(_read(p)) if e.checker}
    assert used <= set(exercises.__all__)
