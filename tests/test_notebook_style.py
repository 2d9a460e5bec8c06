"""Code on the page must fit the rendered page column: no code line longer than 88 characters;
and no chapter writes its own PyTorch hooks (it reads the model through cmixlib's capture points).

The book renders code cells in a fixed-width column; longer lines get a horizontal scroll bar
and are hard to read. The test is parametrised per notebook, so each chapter fails on its own and
the message lists every offending line (cell index, line number, length).
"""
from __future__ import annotations

import re
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


#: A hook registered in a code cell: forward hooks, forward pre-hooks, backward hooks, module
#: hooks of torch.nn.modules.module. Chapters read internals through ``cmixlib.capture`` (named
#: capture points) and change them through ``cmixlib.forward.points.edited``.
HOOK_CALL = re.compile(r"\bregister_(?:module_)?(?:forward|forward_pre|full_backward|"
                       r"full_backward_pre|backward)_hook\s*\(")


def hook_calls(path: Path) -> list[tuple[int, int, str]]:
    """``(cell index, line number, line)`` of every hook registration in a code cell."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return [(k, n, line.strip()) for k, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for n, line in enumerate(cell.source.splitlines(), start=1)
            if HOOK_CALL.search(line)]


def test_the_hook_pattern_finds_hooks():
    for line in ("h = m.register_forward_hook(f)",
                 "m.register_forward_pre_hook(f, with_kwargs=True)",
                 "t.register_full_backward_hook (g)",
                 "nn.modules.module.register_module_forward_hook(f)"):
        assert HOOK_CALL.search(line), line
    assert not HOOK_CALL.search("with edited(layer, 'values', f):")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_no_chapter_defines_a_hook(path):
    found = hook_calls(path)
    report = "\n".join(f"  {path.name}: cell {k}, line {n}: {line}" for k, n, line in found)
    assert not found, (f"{path.name} registers PyTorch hooks; read the model through "
                       "cmixlib.capture(bundle, text)[layer, name] and change it with "
                       f"cmixlib.forward.points.edited instead:\n{report}")
