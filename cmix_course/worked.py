"""Exercise first: the book's worked answer to an exercise comes after the exercise, folded.

A code cell that shows the answer of a computational exercise (the book's own version,
compared with the library) carries the metadata ``cmix = {"worked": "<exercise id>"}`` and the
tag ``hide-input``. :func:`check_worked` (part of :func:`cmix_course.editions.check_notebook`)
refuses a worked cell above or inside its exercise, or unfolded; :func:`answer_leaks` lists the
code cells of a notebook or an edition that show a computational exercise's answer above it.
Functions here take the exercises as :func:`cmix_course.editions.exercises` lists them.
"""
from __future__ import annotations

import ast

#: Metadata key ``cmix.worked`` of a code cell: the id of the exercise whose answer it shows.
WORKED = "worked"
#: Tags of the cells that belong to an exercise (a worked cell is none of them).
EXERCISE_TAGS = {"exercise", "answer", "solution", "grading"}


def _tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _all_defs(source: str) -> set[str]:
    """Every function and class a cell defines, at any depth (a helper inside a loop too)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def worked_cells(nb) -> dict[str, list[int]]:
    """The cells that show an exercise's worked answer (metadata ``cmix.worked``), by exercise."""
    out: dict[str, list[int]] = {}
    for k, cell in enumerate(nb.cells):
        ex_id = cell.get("metadata", {}).get("cmix", {}).get(WORKED)
        if ex_id is not None:
            out.setdefault(str(ex_id), []).append(k)
    return out


def worked_names(nb, found) -> dict[str, set[str]]:
    """For each computational exercise: its answer's name and the names of the functions its
    worked cells define (what must not be defined above the exercise)."""
    worked = worked_cells(nb)
    out = {}
    for ex in found:
        if ex.kind == "computational":
            names = {ex.answer} if ex.answer else set()
            for k in worked.get(ex.id, []):
                names |= _all_defs(nb.cells[k].source)
            out[ex.id] = names
    return out


def answer_leaks(nb, found, names: dict[str, set[str]] | None = None) -> list[str]:
    """Code cells that show a computational exercise's answer above its statement: a cell that
    defines a function named in ``names[exercise id]`` (default :func:`worked_names` of ``nb``;
    pass another version's names to check an older notebook), or one of the exercise's worked
    cells. Empty when every exercise comes before its answer."""
    names = worked_names(nb, found) if names is None else names
    worked = worked_cells(nb)
    leaks = []
    for ex in found:
        if ex.kind != "computational":
            continue
        want = set(names.get(ex.id, ())) | ({ex.answer} if ex.answer else set())
        for k in range(ex.cell):
            cell = nb.cells[k]
            if cell.cell_type != "code":
                continue
            hit = sorted(_all_defs(cell.source) & want)
            if hit:
                leaks.append(f"cell {k} defines {hit} above exercise {ex.id} (cell {ex.cell}): "
                             f"the reader sees the answer before the question")
            elif k in worked.get(ex.id, []):
                leaks.append(f"cell {k}, the worked answer of exercise {ex.id}, comes before "
                             f"the exercise (cell {ex.cell})")
    return leaks


def check_worked(nb, found, problems: list[str]) -> None:
    """Each worked cell: a code cell, after its computational exercise's last cell, folded."""
    by_id = {ex.id: ex for ex in found}
    for ex_id, cells in worked_cells(nb).items():
        ex = by_id.get(ex_id)
        for k in cells:
            where = f"cell {k} (worked answer of exercise {ex_id})"
            if ex is None or ex.kind != "computational":
                problems.append(f"{where}: metadata cmix.worked must name a computational "
                                f"exercise of this notebook")
                continue
            cell = nb.cells[k]
            if cell.cell_type != "code" or _tags(cell) & EXERCISE_TAGS:
                problems.append(f"{where}: must be a code cell of the book, not part of an "
                                f"exercise")
            if k <= ex.cell + 3:
                problems.append(f"{where}: must come after the exercise's last cell (cell "
                                f"{ex.cell + 3}); the reader would see the answer first")
            if "hide-input" not in _tags(cell):
                problems.append(f"{where}: must be folded (tag 'hide-input')")
