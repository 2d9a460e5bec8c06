"""Code on the page must fit the rendered page column: no code line longer than 88 characters.

The book renders code cells in a fixed-width column; longer lines get a horizontal scroll bar
and are hard to read. The test is parametrised per notebook, so each chapter fails on its own and
the message lists every offending line (cell index, line number, length).
"""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MAX_LINE = 88


def long_code_lines(path: Path, limit: int = MAX_LINE) -> list[tuple[int, int, int]]:
    """``(cell index, line number, length)`` of each code line of ``path`` over ``limit``.

    The cell index counts all cells of the notebook from 0; line numbers count from 1.
    """
    import nbformat

    nb = nbformat.read(path, as_version=4)
    found = []
    for k, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for n, line in enumerate(cell.source.splitlines(), start=1):
            if len(line) > limit:
                found.append((k, n, len(line)))
    return found


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found under notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_code_lines_fit_the_page(path):
    found = long_code_lines(path)
    report = "\n".join(f"  {path.name}: cell {k}, line {n}: {length} characters"
                       for k, n, length in found)
    assert not found, (f"{len(found)} code line(s) longer than {MAX_LINE} characters "
                       f"in {path.name}:\n{report}")
