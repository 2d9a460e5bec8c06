"""Coursework editions (cmix_course.editions): the exercise format of chapters 2-16
(difficulty, minutes and points shown under each heading), the student edition (no solutions,
up to date, runs with empty answers and is graded as not attempted) and the instructors'
page."""
from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from cmix_course import editions as E
from cmix_course.grading import grade_submission

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = E.chapter_notebooks(ROOT)
STUDENT = ROOT / E.STUDENT_DIR


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def test_chapters_2_to_16_are_all_there():
    assert [E.chapter_number(p) for p in CHAPTERS] == list(E.EXERCISE_CHAPTERS)
    assert list(E.EXERCISE_CHAPTERS) == list(range(2, 17))


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
    """Top to bottom, quick mode, graded against the chapter: no error, every exercise not
    attempted, 0 points."""
    pytest.importorskip("nbclient")
    import os

    g = grade_submission(STUDENT / name, root=ROOT, quick=True, random_seeds=[1, 2],
                         cache=os.environ.get("CMIX_CACHE"))      # the book's own notebooks
    assert g.error is None and not g.notes, (g.error, g.notes)
    assert {e.status for e in g.exercises} == {"not attempted"}, [(e.exercise, e.status) for e in g.exercises]
    assert g.total == 0


def test_every_exercise_shows_its_difficulty_minutes_and_points():
    """Metadata and the line under the heading agree (the format check), and the values are
    plausible: one to three stars, points and minutes positive, the answer's name known."""
    for path in CHAPTERS:
        nb = _read(path)
        for ex in E.exercises(nb):
            assert ex.difficulty in (1, 2, 3) and ex.points > 0 and ex.minutes > 0, ex
            line = nb.cells[ex.cell].source.splitlines()[2]
            assert line == E.exercise_line(ex) and ex.stars in line, line
            if ex.kind == "computational":
                assert ex.answer and f"def {ex.answer}(" in nb.cells[ex.cell + 1].source
                assert ex.forbidden and any(v == "hidden" for _, v in ex.tests) and ex.random_tests
    nb = _read(CHAPTERS[0])
    ex = E.exercises(nb)[0]
    nb.cells[ex.cell].metadata["cmix"]["difficulty"] = 4
    assert any("difficulty" in p for p in E.check_notebook(nb, CHAPTERS[0]))


def test_student_edition_keeps_no_hidden_tests_but_names_its_source():
    for path in CHAPTERS:
        student = _read(STUDENT / path.name)
        assert student.metadata["cmix"]["source"] == path.name
        assert not any("forbidden" in c.metadata.get("cmix", {}) for c in student.cells)


@pytest.mark.parametrize("module", ["cmixlib.cli", "cmix_course"])
def test_cli_checks_the_format(module):
    run = subprocess.run([sys.executable, "-m", module, "editions", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert len(re.findall(r": OK \(", run.stdout)) == len(CHAPTERS)


def test_instructors_page_lists_every_chapter_and_exercise():
    from cmix_course import course
    from cmixlib.book import REPO_URL

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
    assert "| difficulty | minutes | points |" in table[0]
    assert all(re.search(r"\| [★☆]{3} \| \d+ \| \d+ \|", row) for row in table[2:]), table[2]


def test_every_checker_is_tested_on_wrong_answers():
    """Each exported checker is called at least twice in the tests/test_exercises*.py files: on
    the solution and on wrong answers (often a loop over several; those tests assert each
    answer's message)."""
    import cmix_course as exercises

    texts = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_exercises*.py"))
    for name in (n for n in exercises.__all__ if n.startswith("check_")):
        calls = len(re.findall(rf"\b{name}\(", texts))
        assert calls >= 2, f"{name}: {calls} calls in the exercise tests"
    used = {e.checker for p in CHAPTERS for e in E.exercises(_read(p)) if e.checker}
    assert used <= set(exercises.__all__)


# --- exercise first (issue 43): the worked answer comes after its exercise, folded ----------------

#: The computational exercises whose answer the chapter also works out (the book's own version,
#: compared with the library): each has a worked cell, after the exercise.
WORKED = {"2.1", "3.1", "4.1", "5.1", "6.1", "7.1", "8.1"}
#: The last commit whose chapters showed the worked answer above the exercise.
BEFORE_EXERCISE_FIRST = "e5e6938"


def test_worked_answers_come_after_their_exercise_and_are_folded():
    seen = set()
    for path in CHAPTERS:
        nb = _read(path)
        found = {e.id: e for e in E.exercises(nb)}
        for ex_id, cells in E.worked_cells(nb).items():
            seen.add(ex_id)
            assert found[ex_id].kind == "computational"
            for k in cells:
                assert k > found[ex_id].cell + 3, (path.name, ex_id, k)
                assert "hide-input" in E.tags(nb.cells[k]) and nb.cells[k].cell_type == "code"
    assert WORKED <= seen, WORKED - seen


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_student_edition_shows_no_worked_answer_above_its_exercise(path):
    """In the committed student edition no code cell above a computational exercise defines its
    answer's function or a function of its worked cells, nor is one of its worked cells."""
    source, student = _read(path), _read(STUDENT / path.name)
    assert E.worked_cells(student).keys() == E.worked_cells(source).keys()
    leaks = E.answer_leaks(student, E.worked_names(source))
    assert not leaks, leaks


def _old_order(nb, ex_id: str):
    """The order before issue 43: the exercise's four cells moved below its worked answer."""
    nb = copy.deepcopy(nb)
    ex = next(e for e in E.exercises(nb) if e.id == ex_id)
    cells = nb.cells[ex.cell:ex.cell + 4]
    del nb.cells[ex.cell:ex.cell + 4]
    at = max(E.worked_cells(nb)[ex_id]) + 1
    nb.cells[at:at] = cells
    return nb


WORKED_CASES = [(p, e) for p in CHAPTERS for e in sorted(E.worked_cells(_read(p)))]


@pytest.mark.parametrize("path, ex_id", WORKED_CASES,
                         ids=[f"{p.stem[:2]}-{e}" for p, e in WORKED_CASES])
def test_the_checks_fail_on_the_old_order(path, ex_id):
    """The format check and the student-edition check both catch an exercise placed below its
    worked answer, and the format check an unfolded worked cell."""
    nb = _read(path)
    old = _old_order(nb, ex_id)
    problems = E.check_notebook(old, path)
    assert any(f"worked answer of exercise {ex_id}" in p and "must come after" in p
               for p in problems), problems
    leaks = E.answer_leaks(E.student_edition(old, path.name), E.worked_names(nb))
    assert any(f"exercise {ex_id}" in p for p in leaks), leaks
    k = E.worked_cells(nb)[ex_id][0]
    nb.cells[k].metadata["tags"] = []
    assert any("must be folded" in p for p in E.check_notebook(nb, path))


def test_the_leak_check_fails_on_the_chapter_before_exercise_first():
    """The real old chapter 3 (from git history): its student edition defines `rollout_by_hand`
    above Exercise 3.1, and the check says so (with the names of today's worked cell)."""
    name = "03_attention_rollout_flow.ipynb"
    run = subprocess.run(["git", "show", f"{BEFORE_EXERCISE_FIRST}:notebooks/{name}"], cwd=ROOT,
                         capture_output=True, text=True)
    if run.returncode != 0:
        pytest.skip(f"commit {BEFORE_EXERCISE_FIRST} is not in this clone's history")
    old = nbformat.reads(run.stdout, as_version=4)
    names = E.worked_names(_read(ROOT / "notebooks" / name))
    leaks = E.answer_leaks(E.student_edition(old, name), names)
    assert any("rollout_by_hand" in p and "exercise 3.1" in p for p in leaks), leaks
    assert not E.answer_leaks(_read(STUDENT / name), names)
