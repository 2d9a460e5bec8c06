"""Running a notebook in a fresh kernel (the book's own tests run the chapters this way) and
reading an executed notebook's errors and checker reports. Grading runs submissions in
:mod:`.sandbox` instead, and never reads what a notebook printed."""
from __future__ import annotations

import os
from pathlib import Path

from .checking import CHECK_MIME


def execute(nb, cwd: str | Path, quick: bool = False, timeout: int = 900, *,
            allow_errors: bool = True, env: dict | None = None, cell_timeout=None,
            interrupt_on_timeout: bool = False, **client_options):
    """Execute ``nb`` top to bottom in a fresh ``python3`` kernel (in folder ``cwd``), by
    default continuing past errors. ``quick`` sets ``CMIX_QUICK=1``; ``env`` adds variables
    (the kernel inherits this process's environment, restored afterwards). ``cell_timeout``:
    a function of the cell giving its time limit (else ``timeout`` for every cell);
    ``interrupt_on_timeout``: interrupt a cell past its limit and go on (else raise).
    ``client_options`` go to ``nbclient.NotebookClient`` (hooks, ``skip_cells_with_tag``)."""
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
