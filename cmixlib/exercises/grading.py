"""Autograding: run a student's notebook and read back what each exercise's checker said.

Every checker displays its report with a machine-readable twin (MIME type
:data:`~cmixlib.exercises.checking.CHECK_MIME`: checker name, status, messages). :func:`grade`
executes a notebook (or takes one already executed), finds the exercises from the statement
cells' metadata (:mod:`.editions`) and returns one row per exercise:

* computational: the status of the **last** report of its checker in the notebook (``passed``,
  ``failed``, ``not attempted``; ``not run`` if the checker never reported, e.g. because an
  earlier cell raised), with the checker's messages as detail;
* interpretive: ``answered (grade by hand)`` with the student's text, or ``not attempted`` when
  the answer cell still holds the template.

Command line: ``cmix grade NOTEBOOK... [--quick] [--no-execute] [--out grades.csv]``.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from .checking import CHECK_MIME, NOT_ATTEMPTED
from .editions import ANSWER, ANSWER_TEXT, EXERCISE, chapter_number, exercises, tags

NOT_RUN = "not run"
BY_HAND = "answered (grade by hand)"


def execute(nb, cwd: str | Path, quick: bool = False, timeout: int = 900, *,
            allow_errors: bool = True, env: dict | None = None):
    """Execute ``nb`` top to bottom in a fresh ``python3`` kernel (in folder ``cwd``), by
    default continuing past errors. ``quick`` sets ``CMIX_QUICK=1``; ``env`` adds variables
    (the kernel inherits this process's environment, restored afterwards)."""
    from nbclient import NotebookClient

    old = dict(os.environ)
    os.environ.update(env or {})
    if quick:
        os.environ["CMIX_QUICK"] = "1"
    os.environ.setdefault("MPLBACKEND", "Agg")
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                       resources={"metadata": {"path": str(cwd)}},
                       record_timing=False).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    return nb


def check_reports(nb) -> list[dict]:
    """Every checker report in the notebook's outputs, in cell order (``cell`` added)."""
    found = []
    for k, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            record = output.get("data", {}).get(CHECK_MIME)
            if record:
                found.append({**record, "cell": k})
    return found


def error_cells(nb) -> list[str]:
    """``cell k: Error: message`` for every cell whose output is an error."""
    return [f"cell {k}: {o.get('ename')}: {o.get('evalue')}"
            for k, cell in enumerate(nb.cells) for o in cell.get("outputs", [])
            if o.get("output_type") == "error"]


def grade(notebook, *, execute_first: bool = True, quick: bool = False,
          timeout: int = 900) -> pd.DataFrame:
    """One row per exercise: ``exercise, kind, title, status, detail`` (see the module docstring).

    ``notebook``: a path or an ``nbformat`` notebook. With ``execute_first`` (default) the
    notebook is run first (in its own folder; ``quick`` sets ``CMIX_QUICK=1``); without, its saved
    outputs are read.
    """
    import nbformat

    path = Path(notebook) if isinstance(notebook, (str, os.PathLike)) else None
    nb = nbformat.read(path, as_version=4) if path else notebook
    if execute_first:
        nb = execute(nb, path.parent if path else Path.cwd(), quick=quick, timeout=timeout)
    found = exercises(nb, chapter_number(path) if path else None)
    if not found:
        raise ValueError(f"{path or 'the notebook'} has no exercises (no statement cell tagged "
                         f"'exercise' with cmix metadata): is it a chapter 2-14 notebook?")
    reports = check_reports(nb)
    rows = []
    for ex in found:
        if ex.kind == "computational":
            mine = [r for r in reports if r.get("checker") == ex.checker]
            if mine:
                status = mine[-1]["status"]
                detail = " | ".join(m.strip() for m in mine[-1].get("messages", []))
            else:
                status, detail = NOT_RUN, "the checker never reported (did an earlier cell fail?)"
        else:
            answers = [c for c in nb.cells[ex.cell + 1:] if tags(c) >= {EXERCISE, ANSWER}]
            text = answers[0].source.strip() if answers else ""
            if not text or text == ANSWER_TEXT:
                status, detail = NOT_ATTEMPTED, ""
            else:
                prompt = ANSWER_TEXT.split("(")[0].strip()          # "**Your answer.**"
                status, detail = BY_HAND, text.replace(ANSWER_TEXT, "").replace(prompt, "").strip()
        rows.append({"exercise": ex.id, "kind": ex.kind, "title": ex.title, "status": status,
                     "detail": detail})
    out = pd.DataFrame(rows)
    out.attrs["errors"] = error_cells(nb)
    return out
