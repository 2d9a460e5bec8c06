"""Execute every chapter notebook in quick mode (CMIX_QUICK=1) and fail on any error.

Runs with nbclient on the ``python3`` kernel of the interpreter running pytest (the project's
venv), in the notebook's own folder, like the book build. Usage outside pytest, to look at the
outputs: ``python tests/test_notebooks.py notebooks/02_encoder_layer.ipynb [out.ipynb]``.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TIMEOUT = int(os.environ.get("CMIX_NB_TIMEOUT", "600"))


def _kernel_env() -> dict:
    env = dict(os.environ)
    env["CMIX_QUICK"] = "1"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("MPLBACKEND", "Agg")
    # the kernel must import this checkout's cmixlib
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def execute_notebook(path: Path, timeout: int = TIMEOUT):
    """Execute ``path`` in quick mode and return the executed notebook (raises on a cell error)."""
    import nbformat

    from cmix_course.grading import execute

    nb = nbformat.read(path, as_version=4)
    return execute(nb, path.parent, quick=True, timeout=timeout, allow_errors=False,
                   env=_kernel_env())


def _error_outputs(nb) -> list[str]:
    found = []
    for k, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                found.append(f"cell {k}: {output.get('ename')}: {output.get('evalue')}")
    return found


@pytest.mark.slow
@pytest.mark.skipif(not NOTEBOOKS, reason="no notebooks yet")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_in_quick_mode(path):
    pytest.importorskip("nbclient")
    start = time.time()
    nb = execute_notebook(path)
    assert not _error_outputs(nb)
    # every exercise's solution passes its checker (the last report of each checker)
    from cmix_course.grading import check_reports

    last = {r["checker"]: r["status"] for r in check_reports(nb)}
    assert all(status == "passed" for status in last.values()), last
    elapsed = time.time() - start
    print(f"{path.name}: {elapsed:.1f}s")


def test_notebooks_start_with_the_colab_setup_cell():
    import nbformat

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code, f"{path.name} has no code cell"
        first = code[0].source
        assert '"google.colab" in sys.modules' in first, f"{path.name}: first code cell is not the Colab setup"
        assert "setup_notebook" in first
        assert nb.metadata.get("kernelspec", {}).get("name") == "python3", path.name


if __name__ == "__main__":
    import nbformat

    src = Path(sys.argv[1]).resolve()
    t0 = time.time()
    executed = execute_notebook(src)
    print(f"{src.name}: executed in {time.time() - t0:.1f}s")
    if len(sys.argv) > 2:
        nbformat.write(executed, sys.argv[2])
