"""Autograding from the instructor's copy: run a submission in a sandboxed kernel, call its
answers there, and test the plain numbers they return in this process.

The flow for one submitted notebook (:func:`grade_submission`):

1. **The assignment** is the instructor's copy of the chapter (``notebooks/NN_*.ipynb``, or
   ``--assignment``): its exercises, points, answer names, visible and hidden tests and
   forbidden functions (``cmix_course.editions.exercises``). Nothing of that is read from
   the submission, so a lost or edited cell tag, a changed point value or a deleted checker call
   changes nothing.
2. **Reading the code** (:mod:`.scan`, no execution): the cells that are the book's own (equal
   to a code cell of the instructor's copy or of the student edition: the setup cell, the
   chapter's cells) are recognised and never flagged; in the student's own cells, code that
   could stand in for an answer (computed imports, ``exec``, file reading, patching) is listed;
   an answer that refers to the exercise's library function (names resolved with function
   scope); reports written by hand; cells with syntax errors.
3. **Running it** (:mod:`.sandbox`): every output is cleared and the notebook runs top to
   bottom in a fresh kernel, its own process, in a temporary folder outside the repository with
   an environment built from nothing and its own copies of the packages, continuing past
   errors, with a time limit per cell and for the whole notebook. ``answers_only`` runs only
   the setup cell, the student's cells and the book's statements they need.
4. **Testing** (:mod:`.harness`): the checkers run in *this* process with the visible seed,
   the instructor's hidden seeds and ``random`` seeds drawn for this batch (so a hard-coded
   answer fails); each call of the student's function is sent to the kernel with the grader's
   inputs and comes back as plain numbers, which the checker compares with its reference.
   The seeds never leave this process; nothing the notebook patches can change a verdict.
5. **Points**: a computational exercise earns its points when every test passes, and when
   some fail, the partial credit of its rubric (:mod:`.rubric`: points per test case passed
   in every test, or per likely cause, as the grading notes define it); an answer that
   passes but may not be the student's work (step 2) is *flagged (grade by hand)*, pending with
   the reason, never 0; one that is a library function, or ran the library's function for the
   exercise while tested, is *copied* (0). An interpretive one is *answered (grade by hand)*
   (its text goes to the feedback) or *not attempted*.

The student's id comes from the file name only (:func:`student_id`). Anything that goes wrong
with one submission (an unreadable file, a kernel that dies) gives a ``SubmissionGrade`` with
``error`` set and zero points, never an exception: :mod:`.gradebook` grades a whole class and
writes the CSV files and the feedback.
"""
from __future__ import annotations

import copy
import random
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import scan
from .checking import FAILED, NOT_ATTEMPTED, PASSED
from .rubric import partial_credit
from .running import check_reports, error_cells, execute  # noqa: F401 - used by the book's tests
from .editions import (ANSWER_TEXT, STUDENT_DIR, Exercise, chapter_notebooks, chapter_number,
                       exercises, tags)

NOT_RUN = "not run"
BY_HAND = "answered (grade by hand)"
COPIED = "copied"
FLAGGED = "flagged (grade by hand)"
TIMED_OUT = "timed out"
ERROR = "error"


@dataclass
class ExerciseGrade:
    """One exercise of one submission: ``points`` is None while a human has to grade it."""

    exercise: str
    kind: str
    title: str
    max_points: int
    status: str
    points: float | None = 0.0
    feedback: list[str] = field(default_factory=list)
    answer: str = ""
    #: The rubric's parts of a failed computational exercise (:class:`.rubric.Part`).
    parts: list = field(default_factory=list)


@dataclass
class SubmissionGrade:
    """The grade of one submitted notebook."""

    student: str
    file: str
    assignment: str
    exercises: list[ExerciseGrade] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    seeds: list[int] = field(default_factory=list)

    @property
    def total(self) -> float:
        """Points earned so far (the exercises graded by hand not included)."""
        return float(sum(e.points for e in self.exercises if e.points is not None))

    @property
    def max_total(self) -> int:
        return int(sum(e.max_points for e in self.exercises))

    @property
    def pending(self) -> list[str]:
        """The exercises left to grade by hand."""
        return [e.exercise for e in self.exercises if e.points is None]


# ------------------------------------------------------------------------------------------
# the assignment and the student
# ------------------------------------------------------------------------------------------

def load_assignment(path: str | Path) -> tuple[str, list[Exercise], set[str]]:
    """The instructor's copy at ``path``: its file name, its exercises and the texts of its
    markdown cells (the chapter's own prose, never a student's answer)."""
    import nbformat

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    found = exercises(nb, chapter_number(path))
    if not found:
        raise ValueError(f"{path} defines no exercises (no statement cell tagged 'exercise' "
                         f"with cmix metadata): is it a chapter 2-14 or 16 notebook?")
    known = {c.source.strip() for c in nb.cells if c.cell_type == "markdown"}
    return path.name, found, known


def book_code(assignment: str | Path, root: str | Path = ".") -> set[str]:
    """The normalised code cells that are the book's own for this chapter: those of the
    instructor's copy but its solutions, and those of the committed student edition (its
    setup cell, starter code). A submission's cell equal to one of them is not the student's
    code, so :func:`scan.suspicious` does not read it (the setup cell's Colab line is no
    student's trick)."""
    import nbformat

    out: set[str] = set()
    assignment = Path(assignment)
    for p in (assignment, Path(root) / STUDENT_DIR / assignment.name):
        if p.is_file():
            nb = nbformat.read(p, as_version=4)
            out |= {scan.normalise(c.source) for c in nb.cells if c.cell_type == "code"
                    and "solution" not in tags(c)}
    return out


def find_assignment(submission: str | Path, nb=None, root: str | Path = ".") -> Path:
    """The instructor's copy for a submission: the chapter whose number starts the file name
    (``07_value_zeroing.ipynb``, ``alice_07_value_zeroing.ipynb``) or, failing that, the
    notebook's metadata ``cmix.source`` (written into the student edition)."""
    chapters = {p.name: p for p in chapter_notebooks(root)}
    name = Path(submission).name
    for stem_name, p in chapters.items():
        if Path(stem_name).stem in name:
            return p
    source = (nb.metadata.get("cmix", {}) if nb is not None else {}).get("source")
    if source in chapters:
        return chapters[source]
    raise ValueError(f"{name}: cannot tell which chapter this is (name the chapter's file in the "
                     f"submission's name, or pass the instructor's copy with --assignment)")


def student_id(path: str | Path, assignment: str = "", pattern: str | None = None) -> str:
    """The student's id, from the file name only (never from what the notebook says): the
    named group ``id`` of ``pattern`` matched on the file name (e.g. an LMS export's
    ``lastname_12345_678_file.ipynb``); else the file name without the chapter's name
    (``s1234_07_value_zeroing.ipynb`` -> ``s1234``) and without the ``.ipynb``."""
    name = Path(path).name
    if pattern:
        m = re.search(pattern, name)
        if m and m.groupdict().get("id"):
            return m.group("id")
    stem = Path(name).stem
    if assignment:
        stem = stem.replace(Path(assignment).stem, "")
    stem = stem.strip(" _-.")
    return stem or Path(name).stem


def draw_seeds(count: int, batch_seed: int | None = None) -> list[int]:
    """``count`` checker seeds for the randomised tests of one batch (``batch_seed`` makes them
    reproducible; by default they come from the system's random source)."""
    rng = random.Random(batch_seed if batch_seed is not None else secrets.randbits(64))
    return [rng.randrange(1000, 2 ** 31) for _ in range(count)]


def grading_spec(found: list[Exercise], random_seeds: list[int], check_timeout: float) -> dict:
    """What the harness needs: per computational exercise its id, checker, answer name and
    tests ``[seed, visibility]`` (the visible and hidden seeds of the instructor's copy, then
    the batch's random seeds, as hidden tests)."""
    out = []
    for ex in found:
        if ex.kind != "computational":
            continue
        tests = [list(t) for t in ex.tests] + [[s, "hidden"] for s in random_seeds[:ex.random_tests]]
        out.append({"id": ex.id, "checker": ex.checker, "answer": ex.answer, "tests": tests,
                    "forbidden": [f.split(".")[-1] for f in ex.forbidden]})
    return {"exercises": out, "check_timeout": check_timeout}


# ------------------------------------------------------------------------------------------
# running
# ------------------------------------------------------------------------------------------

def run_submission(nb, spec: dict, *, timeout: float = 600, cell_timeout: float = 300,
                   quick: bool = False, only: dict[int, str | None] | None = None,
                   cache: str | None = None) -> tuple[object, dict | None, list[str]]:
    """Run the submission ``nb`` (outputs cleared) in a sandboxed kernel (:mod:`.sandbox`),
    then the instructor's tests in this process (:mod:`.harness`); return the executed
    notebook, the test records by exercise id and notes (cells that timed out).
    ``only``: run just this code (quick grading, :func:`cmix_course.scan.needed_code`)."""
    import shutil

    from . import harness
    from .sandbox import Kernel, make_sandbox, new_root

    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notes: list[str] = []
    root = new_root()
    try:
        kernel = Kernel(nb, make_sandbox(root, quick, cache), timeout=timeout,
                        cell_timeout=cell_timeout)
        with kernel.start():
            timed_out, skipped = kernel.run_notebook(only)
            records = harness.run(spec, kernel)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    notes += [f"cell {k} was stopped at the time limit ({cell_timeout:g} s per cell, "
              f"{timeout:g} s for the notebook)" for k in timed_out]
    if skipped:
        notes.append(f"{len(skipped)} cells (from cell {skipped[0]} on) did not run: the "
                     f"notebook's time limit ({timeout:g} s) was reached")
    return nb, records, notes


# ------------------------------------------------------------------------------------------
# grading
# ------------------------------------------------------------------------------------------

def _report_lines(messages: list[str], limit: int = 8) -> list[str]:
    """The failed checks and likely causes of a checker's report (what a student must fix):
    every "likely cause" line is kept, whatever the length of the list of differing entries."""
    keep = [m.strip() for m in messages if m.lstrip().startswith(("✗", "·"))]
    causes = [m for m in keep if "likely cause" in m]
    rest = [m for m in keep if "likely cause" not in m]
    more = [f"... and {len(rest) - limit} more lines"] if len(rest) > limit else []
    return rest[:limit] + more + causes


def _grade_computational(ex: Exercise, code: scan.Code, record: dict | None,
                         flagged: list[str]) -> ExerciseGrade:
    g = ExerciseGrade(ex.id, ex.kind, ex.title, ex.points, NOT_RUN, 0.0, answer=ex.answer or "")
    if record is None or record.get("lost"):
        g.feedback.append("the tests did not run: the notebook did not finish within its time "
                          "limit, or its kernel died (see the notes).")
        return g
    if record.get("origin"):
        origin = record["origin"]
        g.status = FAILED if origin.startswith("not a function") else COPIED
        g.feedback.append(f"`{ex.answer}` is {origin}; it must be a function." if g.status == FAILED
                          else f"`{ex.answer}` is `{origin}`, not a function written in the "
                               f"notebook.")
        return g
    if not record.get("found"):
        defined = ex.answer in code.defs
        g.status = NOT_RUN if defined else NOT_ATTEMPTED
        g.feedback.append(
            f"`{ex.answer}` is defined in the notebook but was not defined when the tests ran "
            f"(its cell raised an error, or ran past the time limit)." if defined else
            f"no function named `{ex.answer}` in the notebook (keep the starter's name).")
        return g
    if record.get("library_calls"):
        g.status = COPIED
        g.feedback.append(f"while the tests ran, `{ex.answer}` called "
                          + ", ".join(f"`{c}`" for c in record["library_calls"][:3])
                          + ", which computes the answer for you: write the computation yourself.")
        return g
    tests = record.get("tests", [])
    statuses = [t["status"] for t in tests]
    if not tests or NOT_ATTEMPTED in statuses:
        g.status = NOT_ATTEMPTED
        g.feedback.append(f"not attempted: `{ex.answer}` still raises NotImplementedError or "
                          f"returns None.")
        return g
    if all(s == PASSED for s in statuses):
        g.status, g.points = PASSED, float(ex.points)
        n_hidden = sum(t["visibility"] == "hidden" for t in tests)
        g.feedback.append(f"passed all {len(tests)} tests ({len(tests) - n_hidden} visible, "
                          f"{n_hidden} hidden with other inputs).")
        copied = scan.answer_uses(code, ex.answer or "", ex.forbidden)
        reasons = ([f"`{ex.answer}` refers to {', '.join(f'`{c}`' for c in copied)}, which "
                    f"computes the answer"] if copied else []) + flagged[:3]
        if reasons:
            g.status, g.points = FLAGGED, None
            g.feedback.insert(0, "passes the tests, but to be graded by hand: "
                              + "; ".join(reasons) + ".")
        return g
    g.status = TIMED_OUT if TIMED_OUT in statuses else FAILED
    visible_ok = all(t["status"] == PASSED for t in tests if t["visibility"] == "visible")
    failed = [t for t in tests if t["status"] != PASSED]
    if visible_ok:
        g.feedback.append(f"passes the visible test but fails {len(failed)} of the "
                          f"{sum(t['visibility'] == 'hidden' for t in tests)} hidden tests "
                          f"(other random inputs): does the answer depend on the visible "
                          f"inputs, e.g. hard-coded numbers or sizes?")
    first = failed[0]
    g.feedback.append(f"{first['visibility']} test (checker seed {first['seed']}): "
                      f"{first['status']}")
    g.feedback.extend(f"  {line}" for line in _report_lines(first.get("messages", [])))
    g.points, g.parts = partial_credit(ex.rubric, tests, ex.points)
    if g.parts:
        g.feedback.append(f"partial credit (the grading notes' rubric): {g.points:g} of "
                          f"{ex.points} points")
        g.feedback.extend(f"  · {p.line()}" for p in g.parts)
    return g


def interpretive_answer(nb, ex: Exercise, known: frozenset[str] | set[str] = frozenset()) -> str:
    """The student's text for an interpretive exercise: the markdown cells after its
    statement (found by its heading, ``### Exercise <id>``) up to the next cell that is the
    book's own (a markdown cell of the instructor's copy, ``known``, or another exercise's
    statement) or the next code cell, less the answer template. Whatever headings the
    student writes are part of the answer; a lost tag or an extra cell changes nothing."""
    head = re.compile(rf"^#+\s*Exercise\s+{re.escape(ex.id)}\b")
    other = re.compile(r"^#+\s*Exercise\s+\d+\.\d+\b")
    start = next((k for k, cell in enumerate(nb.cells)
                  if cell.cell_type == "markdown" and head.match(cell.source.lstrip())), None)
    if start is None:
        return ""
    template = ANSWER_TEXT.split("(")[0].strip()
    parts = []
    for cell in nb.cells[start + 1:]:
        text = cell.source.strip()
        if cell.cell_type != "markdown" or other.match(text):
            break
        if text in known and text not in (ANSWER_TEXT, template):
            break                                  # the chapter's own text goes on
        if (tags(cell) & {"solution", "grading"}) or "{admonition} Model answer" in cell.source:
            continue
        text = text.replace(ANSWER_TEXT, "").replace(template, "").strip()
        if text:
            parts.append(text)
    return "\n\n".join(parts)


def _grade_interpretive(ex: Exercise, nb, known: set[str]) -> ExerciseGrade:
    text = interpretive_answer(nb, ex, known)
    if not text:
        return ExerciseGrade(ex.id, ex.kind, ex.title, ex.points, NOT_ATTEMPTED, 0.0,
                             ["no answer written below the exercise."])
    return ExerciseGrade(ex.id, ex.kind, ex.title, ex.points, BY_HAND, None,
                         ["to be graded by hand against the model answer and the grading notes."],
                         answer=text)


def _zero(student: str, file: str, assignment: str, found: list[Exercise], reason: str,
          seconds: float = 0.0) -> SubmissionGrade:
    out = SubmissionGrade(student, file, assignment, error=reason, seconds=seconds)
    out.exercises = [ExerciseGrade(e.id, e.kind, e.title, e.points, ERROR, 0.0, [reason])
                     for e in found]
    return out


def grade_submission(path: str | Path, assignment: str | Path | None = None, *,
                     root: str | Path = ".", timeout: float = 600, cell_timeout: float = 300,
                     check_timeout: float = 60, quick: bool = False,
                     random_seeds: list[int] | None = None, id_pattern: str | None = None,
                     answers_only: bool = False, cache: str | None = None) -> SubmissionGrade:
    """Grade one submitted notebook (see the module docstring); never raises on a bad
    submission. ``assignment``: the instructor's copy (default: found by
    ``find_assignment`` under ``root``). ``random_seeds``: the batch's random checker seeds
    (default: drawn now). ``answers_only``: quick grading (:func:`cmix_course.scan.needed_code`).
    ``cache``: a result cache for the kernel (trusted notebooks only, see :mod:`.sandbox`)."""
    import nbformat

    start = time.monotonic()
    path = Path(path)
    nb = None
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a zero row
        reason = f"the notebook cannot be read ({type(exc).__name__}: {exc})"
    else:
        reason = None
    try:
        a_path = Path(assignment) if assignment else find_assignment(path, nb, root)
        a_name, found, known = load_assignment(a_path)
    except Exception as exc:  # noqa: BLE001
        return _zero(student_id(path, "", id_pattern), path.name, "", [], reason or str(exc))
    if reason:
        return _zero(student_id(path, a_name, id_pattern), path.name, a_name, found, reason)
    code = scan.parse_cells(nb)
    sid = student_id(path, a_name, id_pattern)
    book = scan.book_cells(nb, book_code(a_path, root))
    seeds = list(random_seeds) if random_seeds is not None else draw_seeds(
        max((e.random_tests for e in found), default=0))
    spec = grading_spec(found, seeds, check_timeout)
    only = scan.needed_code(code, nb, book) if answers_only else None
    try:
        executed, records, notes = run_submission(nb, spec, timeout=timeout,
                                                  cell_timeout=cell_timeout, quick=quick,
                                                  only=only, cache=cache)
    except Exception as exc:  # noqa: BLE001 - a dead kernel, a broken notebook
        name = type(exc).__name__
        why = ("the kernel died (the notebook exits, crashes or runs out of memory)"
               if name == "DeadKernelError" else f"the notebook could not be run ({name}: {exc})")
        return _zero(sid, path.name, a_name, found, why, time.monotonic() - start)
    out = SubmissionGrade(sid, path.name, a_name, seconds=0.0, seeds=seeds)
    out.notes.extend(f"cell {k} does not parse: {msg}" for k, msg in code.errors)
    out.notes.extend(e for e in error_cells(executed)[:10]
                     if "KeyboardInterrupt" not in e and "TimeoutError" not in e)
    out.notes.extend(notes)
    forged = scan.forged_reports(code)
    if forged:
        out.notes.append("a checker's report is written by hand (ignored: the grader runs its own "
                         "tests): " + "; ".join(forged[:3]))
    flagged = scan.suspicious(code, book)
    if flagged:
        out.notes.append("code of the notebook's own cells that could stand in for an answer: "
                         + "; ".join(flagged[:5]))
    for ex in found:
        if ex.kind == "computational":
            g = _grade_computational(ex, code, (records or {}).get(ex.id), flagged)
        else:
            g = _grade_interpretive(ex, executed, known)
        out.exercises.append(g)
    out.seconds = round(time.monotonic() - start, 1)
    return out


def grade(notebook, assignment=None, **kwargs) -> pd.DataFrame:
    """One row per exercise of one submission: ``exercise, kind, title, status, points,
    max_points, feedback`` (see :func:`grade_submission`, which takes the same keywords);
    ``attrs``: ``student``, ``error``, ``notes``."""
    g = grade_submission(notebook, assignment, **kwargs)
    df = pd.DataFrame([{"exercise": e.exercise, "kind": e.kind, "title": e.title,
                        "status": e.status, "points": e.points, "max_points": e.max_points,
                        "feedback": " | ".join(e.feedback)} for e in g.exercises])
    df.attrs.update(student=g.student, error=g.error, notes=g.notes)
    return df
