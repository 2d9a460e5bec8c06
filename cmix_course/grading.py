"""Autograding from the instructor's copy: run a submission in a fresh kernel, then test each
answer with the instructor's tests, never with what the notebook printed.

The flow for one submitted notebook (:func:`grade_submission`):

1. **The assignment** is the instructor's copy of the chapter (``notebooks/NN_*.ipynb``, or
   ``--assignment``): its exercises, points, answer names, visible and hidden tests and
   forbidden functions (``cmix_course.editions.exercises``). Nothing of that is read from
   the submission, so a lost or edited cell tag, a changed point value or a deleted checker call
   changes nothing.
2. **Reading the code** (:mod:`.scan`, no execution): the answer functions that call a
   ``reference_*`` function or a library function that computes the answer (reported as
   *copied*, no points), code that reaches into the grader (*flagged*, to be graded by hand),
   reports written by hand (ignored, listed), cells with syntax errors, and a ``STUDENT_ID``.
3. **Running it**: every output is cleared and the notebook runs top to bottom in a fresh
   ``python3`` kernel (nbclient) in an empty folder, continuing past errors, with a time
   limit per cell and for the whole notebook (a cell past it is interrupted; the next ones
   still run while time is left).
4. **Testing**: one cell added at the end loads :mod:`.harness` by path and runs the checkers
   on the answer functions found *by name* in the kernel's namespace (a new cell counts),
   with the visible seed, the instructor's hidden seeds and ``random`` seeds drawn for this
   batch (so a hard-coded answer fails), each test under its own time limit. It writes the
   verdicts to a file the grader named, with a nonce; the notebook's outputs are not read.
5. **Points**: a computational exercise earns its points when every test passes; an
   interpretive one is *answered (grade by hand)* (its text goes to the feedback) or *not
   attempted*.

Anything that goes wrong with one submission (an unreadable file, a kernel that dies) gives a
``SubmissionGrade`` with ``error`` set and zero points, never an exception:
:mod:`.gradebook` grades a whole class and writes the CSV files and the feedback.
"""
from __future__ import annotations

import copy
import json
import os
import random
import re
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import scan
from .checking import CHECK_MIME, FAILED, NOT_ATTEMPTED, PASSED
from .editions import (ANSWER, ANSWER_TEXT, EXERCISE, Exercise, chapter_notebooks, chapter_number,
                       exercises, tags)

NOT_RUN = "not run"
BY_HAND = "answered (grade by hand)"
COPIED = "copied"
FLAGGED = "flagged (grade by hand)"
TIMED_OUT = "timed out"
ERROR = "error"
HARNESS_TAG = "cmix-harness"
SKIP_TAG = "cmix-skip"
HARNESS = Path(__file__).with_name("harness.py")


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
                         f"with cmix metadata): is it a chapter 2-14 notebook?")
    known = {c.source.strip() for c in nb.cells if c.cell_type == "markdown"}
    return path.name, found, known


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


def student_id(path: str | Path, assignment: str = "", code: scan.Code | None = None,
               pattern: str | None = None) -> str:
    """The student's id: the named group ``id`` of ``pattern`` matched on the file name; else
    ``STUDENT_ID = "..."`` in a code cell; else the file name without the chapter's name
    (``s1234_07_value_zeroing.ipynb`` -> ``s1234``) and without the ``.ipynb``."""
    name = Path(path).name
    if pattern:
        m = re.search(pattern, name)
        if m and m.groupdict().get("id"):
            return m.group("id")
    if code is not None:
        sid = scan.student_id_from_cells(code)
        if sid:
            return sid
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
        out.append({"id": ex.id, "checker": ex.checker, "answer": ex.answer, "tests": tests})
    return {"exercises": out, "check_timeout": check_timeout}


# ------------------------------------------------------------------------------------------
# running
# ------------------------------------------------------------------------------------------

def _kernel_env(quick: bool) -> dict:
    import cmixlib

    import cmix_course

    paths = {str(Path(cmix_course.__file__).resolve().parents[1]),
             str(Path(cmixlib.__file__).resolve().parents[1])}
    env = {"MPLBACKEND": "Agg", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([*sorted(paths), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    if quick:
        env["CMIX_QUICK"] = "1"
    return env


def execute(nb, cwd: str | Path, quick: bool = False, timeout: int = 900, *,
            allow_errors: bool = True, env: dict | None = None, cell_timeout=None,
            interrupt_on_timeout: bool = False, **client_options):
    """Execute ``nb`` top to bottom in a fresh ``python3`` kernel (in folder ``cwd``), by
    default continuing past errors. ``quick`` sets ``CMIX_QUICK=1``; ``env`` adds variables
    (the kernel inherits this process's environment, restored afterwards). ``cell_timeout``:
    a function of the cell giving its time limit (else ``timeout`` for every cell);
    ``interrupt_on_timeout``: interrupt a cell past its limit and go on (else raise).
    ``client_options`` go to :class:`nbclient.NotebookClient` (hooks, ``skip_cells_with_tag``)."""
    from nbclient import NotebookClient

    old = dict(os.environ)
    os.environ.update(env or {})
    if quick:
        os.environ["CMIX_QUICK"] = "1"
    os.environ.setdefault("MPLBACKEND", "Agg")
    try:
        NotebookClient(nb, timeout=timeout, timeout_func=cell_timeout, kernel_name="python3",
                       allow_errors=allow_errors, interrupt_on_timeout=interrupt_on_timeout,
                       error_on_timeout={"ename": "TimeoutError",
                                         "evalue": "the cell ran past its time limit",
                                         "traceback": []} if interrupt_on_timeout else None,
                       resources={"metadata": {"path": str(cwd)}},
                       record_timing=False, **client_options).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return nb


def error_cells(nb) -> list[str]:
    """``cell k: Error: message`` for every cell whose output is an error."""
    return [f"cell {k}: {o.get('ename')}: {o.get('evalue')}"
            for k, cell in enumerate(nb.cells) for o in cell.get("outputs", [])
            if o.get("output_type") == "error"]


def check_reports(nb) -> list[dict]:
    """Every checker report in an executed notebook's outputs, in cell order (``cell`` added).

    For the book's own tests (every solution passes its checker), never for grading: a
    notebook can print anything."""
    found = []
    for k, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(CHECK_MIME)
            if record:
                found.append({**record, "cell": k})
    return found


def run_submission(nb, spec: dict, *, timeout: float = 600, cell_timeout: float = 300,
                   quick: bool = False) -> tuple[object, dict | None, list[str]]:
    """Run the submission ``nb`` (outputs cleared) and the harness cell after it; return the
    executed notebook, the harness's records by exercise id (None when the harness did not
    finish) and notes (cells that timed out)."""
    import nbformat

    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nonce = secrets.token_hex(12)
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cmix-grade-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / f"results-{nonce}.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        harness = nbformat.v4.new_code_cell(
            "import importlib.util as _cmix_u, json as _cmix_j\n"
            f"_cmix_s = _cmix_u.spec_from_file_location('_cmix_harness_{nonce}', {str(HARNESS)!r})\n"
            "_cmix_m = _cmix_u.module_from_spec(_cmix_s)\n"
            "_cmix_s.loader.exec_module(_cmix_m)\n"
            f"_cmix_m.run(_cmix_j.load(open({str(spec_path)!r})), {str(out_path)!r}, {nonce!r}, "
            "get_ipython().user_ns)")
        harness.metadata["tags"] = [HARNESS_TAG]
        nb.cells.append(harness)
        n_tests = sum(len(e["tests"]) for e in spec["exercises"])
        harness_budget = int(spec.get("check_timeout", 60) * max(1, n_tests) + 60)
        deadline = time.monotonic() + timeout

        def limit(cell) -> int:
            if HARNESS_TAG in cell.metadata.get("tags", []):
                return harness_budget
            return max(1, int(min(cell_timeout, deadline - time.monotonic())))

        skipped: list[int] = []

        def start(cell, cell_index):          # past the notebook's time limit: skip the rest
            if (cell.cell_type == "code" and HARNESS_TAG not in cell.metadata.get("tags", [])
                    and time.monotonic() >= deadline):
                cell.metadata.setdefault("tags", []).append(SKIP_TAG)
                skipped.append(cell_index)

        timed_out: list[int] = []

        def done(cell, cell_index, execute_reply):
            content = (execute_reply or {}).get("content", {})
            if content.get("status") == "error" and content.get("ename") == "TimeoutError" \
                    and HARNESS_TAG not in cell.metadata.get("tags", []):
                timed_out.append(cell_index)

        execute(nb, work, quick=quick, timeout=int(cell_timeout), cell_timeout=limit,
                env=_kernel_env(quick), interrupt_on_timeout=True, on_cell_start=start,
                on_cell_executed=done, skip_cells_with_tag=SKIP_TAG)
        notes += [f"cell {k} was stopped at the time limit ({cell_timeout:g} s per cell, "
                  f"{timeout:g} s for the notebook)" for k in timed_out]
        if skipped:
            notes.append(f"{len(skipped)} cells (from cell {skipped[0]} on) did not run: the "
                         f"notebook's time limit ({timeout:g} s) was reached")
        records = None
        if out_path.exists():
            data = json.loads(out_path.read_text(encoding="utf-8"))
            if data.get("nonce") == nonce:
                records = {r["exercise"]: r for r in data.get("results", [])}
    return nb, records, notes


# ------------------------------------------------------------------------------------------
# grading
# ------------------------------------------------------------------------------------------

def _report_lines(messages: list[str], limit: int = 8) -> list[str]:
    """The failed checks and likely causes of a checker's report (what a student must fix)."""
    keep = [m.strip() for m in messages if m.lstrip().startswith(("✗", "·"))]
    return keep[:limit] + ([f"... and {len(keep) - limit} more lines"] if len(keep) > limit else [])


def _grade_computational(ex: Exercise, code: scan.Code, record: dict | None,
                         harness_ran: bool) -> ExerciseGrade:
    g = ExerciseGrade(ex.id, ex.kind, ex.title, ex.points, NOT_RUN, 0.0, answer=ex.answer or "")
    copied = scan.answer_uses(code, ex.answer or "", ex.forbidden)
    if copied:
        g.status = COPIED
        g.feedback.append(f"`{ex.answer}` calls {', '.join(f'`{c}`' for c in copied)}, which "
                          f"computes the answer for you: write the computation yourself.")
        return g
    if record is None:
        g.feedback.append("the tests did not run: the notebook did not finish within its time "
                          "limit, or its kernel died (see the notes).")
        return g
    if record.get("origin"):
        origin = record["origin"]
        if origin.startswith("not a function"):
            g.status = FAILED
            g.feedback.append(f"`{ex.answer}` is {origin}; it must be a function.")
        else:
            g.status = COPIED
            g.feedback.append(f"`{ex.answer}` is `{origin}`, not a function written in the "
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
    return g


def interpretive_answer(nb, ex: Exercise, known: frozenset[str] | set[str] = frozenset()) -> str:
    """The student's text for an interpretive exercise: the markdown cells after its
    statement (found by its heading, ``### Exercise <id>``) up to the next heading or code
    cell, less the answer template and less the chapter's own text (``known``: the markdown
    cells of the instructor's copy). A lost tag or an extra cell changes nothing."""
    head = re.compile(rf"^#+\s*Exercise\s+{re.escape(ex.id)}\b")
    start = None
    for k, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and head.match(cell.source.lstrip()):
            start = k
            break
    if start is None:
        return ""
    parts = []
    for cell in nb.cells[start + 1:]:
        if cell.cell_type != "markdown" or cell.source.lstrip().startswith("#"):
            break
        if (tags(cell) & {"solution", "grading"}) or "{admonition} Model answer" in cell.source \
                or cell.source.strip() in known:
            continue
        text = cell.source.replace(ANSWER_TEXT, "").replace(ANSWER_TEXT.split("(")[0].strip(), "")
        if text.strip():
            parts.append(text.strip())
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
                     ) -> SubmissionGrade:
    """Grade one submitted notebook (see the module docstring); never raises on a bad
    submission. ``assignment``: the instructor's copy (default: found by
    ``find_assignment`` under ``root``). ``random_seeds``: the batch's random checker seeds
    (default: drawn now)."""
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
        return _zero(student_id(path), path.name, "", [], reason or str(exc))
    if reason:
        return _zero(student_id(path, a_name, pattern=id_pattern), path.name, a_name, found, reason)
    code = scan.parse_cells(nb)
    sid = student_id(path, a_name, code, id_pattern)
    seeds = list(random_seeds) if random_seeds is not None else draw_seeds(
        max((e.random_tests for e in found), default=0))
    spec = grading_spec(found, seeds, check_timeout)
    try:
        executed, records, notes = run_submission(nb, spec, timeout=timeout,
                                                  cell_timeout=cell_timeout, quick=quick)
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
    flagged = scan.tampering(code)
    for ex in found:
        if ex.kind == "computational":
            g = _grade_computational(ex, code, (records or {}).get(ex.id), records is not None)
            if flagged and g.status not in (NOT_ATTEMPTED,):
                g.status, g.points = FLAGGED, 0.0
                g.feedback.insert(0, "the notebook changes the grading machinery ("
                                  + "; ".join(flagged[:3]) + "): graded by hand.")
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
