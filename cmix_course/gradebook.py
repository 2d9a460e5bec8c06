"""A class's gradebook: grade every submitted notebook and write what an instructor hands on.

:func:`grade_class` grades each file with :func:`cmix_course.grading.grade_submission` (the
same randomised seeds for the whole batch, recorded) and :func:`write_gradebook` writes, into
one folder:

``grades.csv``
    one row per submission, always (a notebook that cannot be read or run gets a row of zeros
    and its reason in ``error``): ``student, file, assignment``, then per exercise its points
    (``<id>``; empty while it waits to be graded by hand) and its status (``<id> status``),
    then ``total`` (points so far), ``max_total``, ``pending`` (exercises to grade by hand),
    ``error``, ``seconds``.
``lms.csv``
    for an LMS gradebook import: ``SIS User ID`` (the student id; Canvas's name for
    institutional ids) and one column named after the assignment holding the total, the two
    columns an importer that maps an id and a grade column needs (e.g. Moodle's CSV import).
``gradescope/<student>/results.json``
    Gradescope's autograder results format (``score``, ``output``, and one ``tests`` entry per
    exercise with ``name``, ``score``, ``max_score``, ``status``, ``output``,
    ``visibility``), for a course that uploads the results or runs the grader inside
    Gradescope's autograder.
``feedback/<student>.md``
    one file per student: each exercise's status and points, and for each one not passed,
    what failed and the checker's diagnosis; the notebook's errors and time-outs.
``batch.json``
    how the batch was graded: the random seeds, the time limits, the assignment(s).
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pandas as pd

from .grading import PASSED, SubmissionGrade, draw_seeds, grade_submission


def grade_class(paths, assignment=None, *, root=".", timeout: float = 600,
                cell_timeout: float = 300, check_timeout: float = 60, quick: bool = False,
                batch_seed: int | None = None, random_tests: int = 4, id_pattern: str | None = None,
                progress=None, answers_only: bool = False) -> list[SubmissionGrade]:
    """Grade every notebook of ``paths`` (one ``SubmissionGrade`` each, in order).

    The randomised tests use the same ``random_tests`` seeds for every student, drawn from
    ``batch_seed`` (random by default; :func:`write_gradebook` records them). ``progress``: a
    function called with each grade as it is done."""
    seeds = draw_seeds(random_tests, batch_seed)
    out = []
    for path in paths:
        g = grade_submission(path, assignment, root=root, timeout=timeout,
                             cell_timeout=cell_timeout, check_timeout=check_timeout, quick=quick,
                             random_seeds=seeds, id_pattern=id_pattern,
                             answers_only=answers_only)
        g.seeds = seeds
        out.append(g)
        if progress:
            progress(g)
    return out


def _unique_ids(grades: list[SubmissionGrade]) -> list[str]:
    """File-safe, unique names for the feedback files (``alice``, ``alice-2``, ...)."""
    seen: dict[str, int] = {}
    out = []
    for g in grades:
        base = re.sub(r"[^\w.@-]+", "_", g.student).strip("._") or "student"
        seen[base] = seen.get(base, 0) + 1
        out.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return out


def gradebook(grades: list[SubmissionGrade]) -> pd.DataFrame:
    """``grades.csv`` as a table (see the module docstring)."""
    ex_ids: list[str] = []
    for g in grades:
        ex_ids += [e.exercise for e in g.exercises if e.exercise not in ex_ids]
    rows = []
    for g in grades:
        row = {"student": g.student, "file": g.file, "assignment": g.assignment}
        by_id = {e.exercise: e for e in g.exercises}
        for ex in ex_ids:
            e = by_id.get(ex)
            row[ex] = None if e is None or e.points is None else e.points
            row[f"{ex} status"] = "" if e is None else e.status
        row.update(total=g.total, max_total=g.max_total, pending=" ".join(g.pending),
                   error=g.error or "", seconds=g.seconds)
        rows.append(row)
    return pd.DataFrame(rows)


def feedback_markdown(g: SubmissionGrade) -> str:
    """One student's feedback file."""
    lines = [f"# Feedback: {g.assignment or 'assignment'}", "",
             f"Student: `{g.student}` (file `{g.file}`)", "",
             f"**Points: {g.total:g} of {g.max_total}**"
             + (f" (exercises {', '.join(g.pending)} still to be graded by hand)" if g.pending else ""),
             ""]
    if g.error:
        lines += [f"**Your notebook could not be graded:** {g.error}. Every exercise counts 0; "
                  f"fix this and submit again, or ask your instructor.", ""]
    for e in g.exercises:
        pts = "to be graded" if e.points is None else f"{e.points:g} / {e.max_points}"
        mark = "✓" if e.status == PASSED else "·" if e.points is None else "✗"
        lines.append(f"## {mark} Exercise {e.exercise}: {e.title} ({e.kind}) - {e.status}, {pts}")
        lines.append("")
        for f in e.feedback:
            lines.append(f"    {f}" if f.startswith("  ") else f"- {f}")
        if e.answer and e.kind == "interpretive":
            lines += ["", "Your answer:", "", *[f"> {line}" for line in e.answer.splitlines()]]
        lines.append("")
    if g.notes:
        lines += ["## Notes on your notebook", ""] + [f"- {n}" for n in g.notes] + [""]
    return "\n".join(lines)


def gradescope_results(g: SubmissionGrade) -> dict:
    """Gradescope's autograder ``results.json`` for one submission."""
    tests = [{"name": f"Exercise {e.exercise}: {e.title}", "score": e.points or 0.0,
              "max_score": e.max_points,
              "status": "passed" if e.status == PASSED else "failed",
              "output": f"{e.status}\n" + "\n".join(e.feedback), "visibility": "visible"}
             for e in g.exercises]
    output = (f"Could not be graded: {g.error}" if g.error else
              f"Points so far: {g.total:g} of {g.max_total}"
              + (f"; to be graded by hand: {', '.join(g.pending)}" if g.pending else ""))
    return {"score": g.total, "output": output, "tests": tests, "visibility": "after_due_date"}


def write_gradebook(grades: list[SubmissionGrade], out_dir: str | Path, *,
                    settings: dict | None = None) -> dict[str, Path]:
    """Write ``grades.csv``, ``lms.csv``, ``gradescope/*/results.json``, ``feedback/*.md`` and
    ``batch.json`` into ``out_dir``; return the paths of the first two and of the folders."""
    out = Path(out_dir)
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    table = gradebook(grades)
    table.to_csv(out / "grades.csv", index=False)
    assignments = sorted({g.assignment for g in grades if g.assignment})
    column = (Path(assignments[0]).stem if len(assignments) == 1 else "Points")
    pd.DataFrame({"SIS User ID": [g.student for g in grades],
                  column: [g.total for g in grades]}).to_csv(out / "lms.csv", index=False)
    for g, name in zip(grades, _unique_ids(grades)):
        (out / "feedback" / f"{name}.md").write_text(feedback_markdown(g), encoding="utf-8")
        gs = out / "gradescope" / name
        gs.mkdir(parents=True, exist_ok=True)
        (gs / "results.json").write_text(json.dumps(gradescope_results(g), indent=1,
                                                    ensure_ascii=False), encoding="utf-8")
    batch = {"graded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "assignments": assignments,
             "random_seeds": grades[0].seeds if grades else [], "submissions": len(grades),
             **(settings or {})}
    (out / "batch.json").write_text(json.dumps(batch, indent=1), encoding="utf-8")
    return {"grades": out / "grades.csv", "lms": out / "lms.csv",
            "feedback": out / "feedback", "gradescope": out / "gradescope"}
