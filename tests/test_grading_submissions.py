"""Submissions built as a student builds them: the committed student edition of a chapter (its
real setup cell, its starter code), with an answer written into the exercise's starter cell.

Used by the honest-solution and forgery tests (tests/test_grading_honest.py,
tests/test_grading_forgeries.py); not a test module itself (no ``test_`` functions)."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
STUDENT = ROOT / "editions" / "student"
NOTEBOOKS = ROOT / "notebooks"


def chapter(number: int) -> str:
    """The file name of chapter ``number`` (``3`` -> ``03_attention_rollout_flow.ipynb``)."""
    return next(NOTEBOOKS.glob(f"{number:02d}_*.ipynb")).name


def instructor_solutions(number: int) -> dict[str, str]:
    """The instructor's solution of each computational exercise of a chapter, by answer name:
    the solution cell up to and including its checker call (what follows is the book's own
    comparison with the library, which uses the chapter's variables)."""
    nb = nbformat.read(NOTEBOOKS / chapter(number), as_version=4)
    out = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or "solution" not in cell.metadata.get("tags", []):
            continue
        lines, kept = cell.source.replace("# Solution\n", "").splitlines(), []
        for line in lines:
            kept.append(line)
            if re.match(r"^check_\w+\(", line):
                break
        name = re.search(r"^check_\w+\((\w+)\)", "\n".join(kept), re.M).group(1)
        out[name] = "\n".join(kept)
    return out


def submission(number: int, answers: dict[str, str], path: Path, *, extra: list[str] = (),
               replace_setup: str | None = None, markdown: dict[str, str] | None = None) -> Path:
    """Write the student edition of chapter ``number`` with ``answers`` (answer name -> code)
    in place of the starter code, ``extra`` code cells appended after the setup, the setup
    cell replaced when ``replace_setup`` is given, and markdown answers (exercise id ->
    text) written into the answer cells."""
    nb = nbformat.read(STUDENT / chapter(number), as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code" or "exercise" not in cell.metadata.get("tags", []):
            continue
        m = re.search(r"^def (\w+)\(", cell.source, re.M)
        if m and m.group(1) in answers:
            imports = [ln for ln in cell.source.splitlines() if ln.startswith(("from ", "import "))]
            checks = [ln for ln in cell.source.splitlines() if re.match(r"^check_\w+\(", ln)]
            body = answers[m.group(1)]
            if re.search(r"^check_\w+\(", body, re.M):
                checks = []
            cell.source = "\n".join([*imports, "", body, "", *checks])
    code_cells = [k for k, c in enumerate(nb.cells) if c.cell_type == "code"]
    if replace_setup is not None:
        nb.cells[code_cells[0]].source = replace_setup
    for k, src in enumerate(extra):
        nb.cells.insert(code_cells[0] + 2 + k, nbformat.v4.new_code_cell(src))
    for ex_id, text in (markdown or {}).items():
        head = re.compile(rf"^#+\s*Exercise\s+{re.escape(ex_id)}\b")
        start = next(k for k, c in enumerate(nb.cells)
                     if c.cell_type == "markdown" and head.match(c.source.lstrip()))
        nb.cells[start + 1].source = text
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path
