"""A class's gradebook: grade every submitted notebook and write what an instructor hands on.

:func:`grade_class` grades each file with :func:`cmix_course.grading.grade_submission` (the
same randomised seeds for the whole batch, recorded) and :func:`write_gradebook` writes, into
one folder:

``grades.csv``
    one row per submission, always (a notebook that cannot be read or run gets a row of zeros
    and its reason in ``error``): ``student, file, assignment``, then per exercise its points
    (``<id>``; empty while it waits to be graded by hand), its status (``<id> status``) and,
    for an exercise some submission got partial credit on, the rubric's parts (``<id> parts``:
    ``test case 'add_identity=False': 3 / 3; ...``, :mod:`.rubric`),
    then ``total`` (points so far), ``max_total``, ``pending`` (exercises to grade by hand),
    ``error``, ``seconds``.
``lms.csv``
    for an LMS gradebook import: ``SIS User ID`` (the student id; Canvas's name for
    institutional ids) and one column named after the assignment holding the total, the two
    columns an importer that maps an id and a grade column needs (e.g. Moodle's CSV import).
``gradescope/<student>/results.json``
    Gradescope's autograder results format (``score``, ``output``, and one ``tests`` entry per
    exercise with ``name``, ``score``, ``max_score``, ``status``, ``output``,
    ``visibility``; an exercise with partial credit has one entry per rubric part, whose
    scores add up to its points), for a course that uploads the results or runs the grader inside
    Gradescope's autograder.
``feedback/<student>.md``
    one file per student: each exercise's status and points, and for each one not passed,
    what failed, the checker's diagnosis and the rubric's points per part; the notebook's
    errors and time-outs.
``hand_grades.csv``
    the instructor's file: one row per exercise to grade by hand (interpretive answers,
    answers flagged for a reason) and per failed computational exercise (its automatic partial
    credit in ``auto_points``, the likely cause and the rubric's parts in ``reason``); fill in
    ``points`` (and ``comment``) and run the grading again: every export then includes them. A regrade keeps every row, adds rows for new
    pending exercises, and never overwrites a hand grade.
``batch.json``
    how the batch was graded: the random seeds, the time limits, the assignment(s).
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pandas as pd

from .grading import FAILED, PASSED, TIMED_OUT, SubmissionGrade, draw_seeds, grade_submission

#: The status of an exercise once its hand grade is in ``hand_grades.csv``.
BY_HAND_DONE = "graded by hand"


def grade_class(paths, assignment=None, *, root=".", timeout: float = 600,
                cell_timeout: float = 300, check_timeout: float = 60, quick: bool = False,
                batch_seed: int | None = None, random_tests: int = 4, id_pattern: str | None = None,
                progress=None, answers_only: bool = False, jobs: int = 1) -> list[SubmissionGrade]:
    """Grade every notebook of ``paths`` (one ``SubmissionGrade`` each, in order).

    The randomised tests use the same ``random_tests`` seeds for every student, drawn from
    ``batch_seed`` (random by default; :func:`write_gradebook` records them). ``progress``: a
    function called with each grade as it is done. ``jobs``: submissions graded at the same
    time (each in its own process and kernel). ``answers_only``: see
    :func:`cmix_course.scan.needed_code`."""
    seeds = draw_seeds(random_tests, batch_seed)
    kwargs = dict(root=root, timeout=timeout, cell_timeout=cell_timeout,
                  check_timeout=check_timeout, quick=quick, random_seeds=seeds,
                  id_pattern=id_pattern, answers_only=answers_only)
    out: list[SubmissionGrade] = []
    if jobs > 1 and len(paths) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
            futures = [pool.submit(grade_submission, p, assignment, **kwargs) for p in paths]
            for f in futures:
                out.append(f.result())
                if progress:
                    progress(out[-1])
    else:
        for path in paths:
            out.append(grade_submission(path, assignment, **kwargs))
            if progress:
                progress(out[-1])
    for g in out:
        g.seeds = seeds
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
    with_parts = {e.exercise for g in grades for e in g.exercises if e.parts}
    rows = []
    for g in grades:
        row = {"student": g.student, "file": g.file, "assignment": g.assignment}
        by_id = {e.exercise: e for e in g.exercises}
        for ex in ex_ids:
            e = by_id.get(ex)
            row[ex] = None if e is None or e.points is None else e.points
            row[f"{ex} status"] = "" if e is None else e.status
            if ex in with_parts:
                row[f"{ex} parts"] = "; ".join(p.line() for p in e.parts) if e else ""
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
        mark = ("✓" if e.status == PASSED or (e.points is not None and e.points >= e.max_points)
                else "·" if e.points is None or 0 < e.points else "✗")
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
    """Gradescope's autograder ``results.json`` for one submission; an exercise still to be
    graded by hand has no score and no status, and says so (Gradescope leaves it to the
    manually graded questions)."""
    tests = []
    for e in g.exercises:
        t = {"name": f"Exercise {e.exercise}: {e.title}", "max_score": e.max_points,
             "output": f"{e.status}\n" + "\n".join(e.feedback), "visibility": "visible"}
        if e.points is None:
            t["name"] += " (pending: graded by hand)"
            t["output"] = "PENDING: to be graded by hand.\n" + t["output"]
        elif e.status == BY_HAND_DONE:              # a human's points: no pass/fail verdict
            t.update(score=e.points)
        elif e.parts:                                # partial credit: one entry per part
            for p in e.parts:
                tests.append({"name": f"Exercise {e.exercise}: {e.title} · {p.name}",
                              "score": p.points, "max_score": p.max_points,
                              "status": "passed" if p.points >= p.max_points else "failed",
                              "output": t["output"], "visibility": "visible"})
            continue
        else:
            t.update(score=e.points, status="passed" if e.points >= e.max_points else "failed")
        tests.append(t)
    output = (f"Could not be graded: {g.error}" if g.error else
              f"Points so far: {g.total:g} of {g.max_total}"
              + (f"; to be graded by hand: {', '.join(g.pending)}" if g.pending else ""))
    return {"score": g.total, "output": output, "tests": tests, "visibility": "after_due_date"}


HAND_GRADES = "hand_grades.csv"
HAND_COLUMNS = ["student", "file", "exercise", "max_points", "status", "reason", "points",
                "comment", "auto_points"]


def _reason(e) -> str:
    causes = [f.strip() for f in e.feedback if "likely cause" in f]
    why = (causes or [e.feedback[0] if e.feedback else ""])[0][:300]
    parts = "; ".join(p.line() for p in e.parts)
    return f"{why} [rubric: {parts}]" if parts else why


def _needs_hand(e) -> bool:
    """Pending exercises, and failed computational ones (their rubric's partial credit is in
    ``auto_points``, the likely cause and the rubric's parts in ``reason``; a hand grade
    replaces the automatic points)."""
    return e.points is None or (e.kind == "computational" and e.status in (FAILED, TIMED_OUT))


def apply_hand_grades(grades: list[SubmissionGrade], out_dir: str | Path) -> pd.DataFrame:
    """Read ``hand_grades.csv`` of ``out_dir`` and put each filled-in ``points`` into the
    grades (status ``graded by hand``, the comment in the feedback); return the table with a
    row added (``points`` empty) for every exercise that needs a human: each pending one
    (interpretive answers, flagged answers) and each failed computational one (its rubric's
    partial credit in ``auto_points``; left empty, the automatic points stand). The file is the
    instructor's: rows are never removed or changed by a regrade, so hand grades survive it."""
    path = Path(out_dir) / HAND_GRADES
    table = (pd.read_csv(path, dtype=str, keep_default_na=False) if path.is_file()
             else pd.DataFrame(columns=HAND_COLUMNS))
    for col in HAND_COLUMNS:
        if col not in table:
            table[col] = ""
    given = {(r.student, r.exercise): r for r in table.itertuples(index=False)
             if str(r.points).strip() != ""}
    known = {(r.student, r.exercise) for r in table.itertuples(index=False)}
    new_rows = []
    for g in grades:
        for e in g.exercises:
            if not _needs_hand(e):
                continue
            r = given.get((g.student, e.exercise))
            if r is not None:
                pts = float(r.points)
                if not 0 <= pts <= e.max_points:
                    raise ValueError(f"{HAND_GRADES}: {g.student} {e.exercise}: {pts:g} points is "
                                     f"not between 0 and {e.max_points}")
                e.points, e.status, e.parts = pts, BY_HAND_DONE, []
                e.feedback.append(f"graded by hand: {pts:g} / {e.max_points}"
                                  + (f" ({r.comment})" if r.comment else ""))
            elif (g.student, e.exercise) not in known:
                new_rows.append({"student": g.student, "file": g.file, "exercise": e.exercise,
                                 "max_points": e.max_points, "status": e.status,
                                 "reason": _reason(e), "points": "", "comment": "",
                                 "auto_points": "" if e.points is None else f"{e.points:g}"})
    if new_rows:
        table = pd.concat([table, pd.DataFrame(new_rows)], ignore_index=True)
    return table[HAND_COLUMNS]


def mark_duplicates(grades: list[SubmissionGrade]) -> None:
    """Two submissions with one student id: both get an error (never one silently replacing
    the other), naming the other file."""
    by_id: dict[str, list[SubmissionGrade]] = {}
    for g in grades:
        by_id.setdefault(g.student, []).append(g)
    for sid, same in by_id.items():
        if len(same) > 1:
            files = ", ".join(g.file for g in same)
            for g in same:
                g.error = (f"{len(same)} submissions have the id {sid!r} ({files}): "
                           f"resolve by hand" + (f"; {g.error}" if g.error else ""))


def write_gradebook(grades: list[SubmissionGrade], out_dir: str | Path, *,
                    settings: dict | None = None) -> dict[str, Path]:
    """Write ``grades.csv``, ``lms.csv``, ``gradescope/*/results.json``, ``feedback/*.md`` and
    ``batch.json`` into ``out_dir``; return the paths of the first two and of the folders."""
    out = Path(out_dir)
    (out / "feedback").mkdir(parents=True, exist_ok=True)
    mark_duplicates(grades)
    apply_hand_grades(grades, out).to_csv(out / HAND_GRADES, index=False)
    table = gradebook(grades)
    table.to_csv(out / "grades.csv", index=False)
    assignments = sorted({g.assignment for g in grades if g.assignment})
    column = (Path(assignments[0]).stem if len(assignments) == 1 else "Points")
    pd.DataFrame({"SIS User ID": [g.student for g in grades],
                  column: [None if g.error and "submissions have the id" in g.error else g.total
                           for g in grades]}).to_csv(out / "lms.csv", index=False)
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
