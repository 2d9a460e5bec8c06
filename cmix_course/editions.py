"""One source, two editions: the chapter notebooks hold exercises *and* solutions, marked by
cell tags; this module checks that format and writes the student and instructor editions.

The cells of one exercise, in order (tags in brackets)::

    statement      markdown [exercise]          metadata cmix = {exercise, kind, checker, answer,
                                                points, difficulty, setting, minutes}
    starter code   code     [exercise]          computational: `raise NotImplementedError`, then the checker
    answer cell    markdown [exercise, answer]  interpretive: where the student writes
    solution       code [solution, hide-input] / markdown [solution] (a collapsed "Model answer")
    grading notes  markdown [grading, remove-cell]  metadata cmix = {tests, forbidden, rubric}

**Exercise first.** Where the chapter also shows the code an exercise asks for (the book's own
version, compared with the library), that code comes *after* the exercise: the code cell has the
metadata ``cmix = {"worked": "<exercise id>"}`` and the tag ``hide-input`` (folded on the site;
both editions keep it). :func:`check_notebook` refuses a worked cell above or inside its
exercise, or unfolded, and :func:`~cmix_course.worked.answer_leaks` lists every code cell of
an edition that shows a computational exercise's answer above it (a function named like the
answer or like a function of its worked cells, or one of its worked cells); see :mod:`.worked`.

The statement's heading is ``### Exercise <id> (<kind>): <title>``, and its second line shows
the difficulty (★ to ★★★), the expected minutes and the points
(:func:`exercise_line`), written from the metadata. ``answer`` names the function the
starter defines: the grader finds it by that name wherever the student wrote it. The grading
notes' metadata holds what only the instructor's copy needs (:mod:`.grading`): the hidden
tests (``{"hidden": [seeds], "random": k}``, checker seeds; ``random`` seeds are drawn anew for
each grading batch), ``forbidden``, the library functions that compute the answer, and
``rubric``, the notes' partial credit per test case and per likely cause (:mod:`.rubric`).

Editions are made with nbconvert's preprocessors (:class:`~nbconvert.preprocessors.TagRemovePreprocessor`
and :class:`~nbconvert.preprocessors.ClearOutputPreprocessor`): the **student** edition drops the
``solution`` and ``grading`` cells and every output; the **instructor** edition keeps everything.
On the book's site, ``hide-input`` collapses solution code, the model answers are dropdown
admonitions and ``remove-cell`` keeps the grading notes off the page.

Command line: ``python -m cmix_course check NOTEBOOK...`` lists format problems;
``python -m cmix_course editions`` (or ``cmix editions``, ``make editions``) writes both
editions (see :func:`write_editions`).
"""
from __future__ import annotations

import ast
import copy
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from . import worked
from .rubric import parse as parse_rubric, problems as rubric_problems
from .worked import WORKED, worked_cells  # noqa: F401 - part of this module's interface

EXERCISE, ANSWER, SOLUTION, GRADING = "exercise", "answer", "solution", "grading"
KINDS = ("computational", "interpretive")
SETTINGS = ("lab", "homework")
STARTER_STUB = "raise NotImplementedError"
ANSWER_TEXT = "**Your answer.** (double-click this cell and write here)"
GRADING_HEAD = "**Grading notes (instructors).**"
#: Difficulty levels, shown as one to three stars.
DIFFICULTIES = (1, 2, 3)
#: Hidden tests of a computational exercise when its grading notes do not say: one fixed
#: checker seed and two seeds drawn anew for each grading batch (randomised inputs).
DEFAULT_TESTS = {"visible": [0], "hidden": [7], "random": 2}
#: Chapters that must carry exercises (file-name prefixes): 2-16, the explorer (15) and the
#: decoders (16) included. The editions, the grader, the instructors' page
#: and the site's student-edition buttons all take their chapters from here.
EXERCISE_CHAPTERS = tuple(range(2, 17))
#: The committed student edition (Colab links point here) and the default instructor folder.
STUDENT_DIR = Path("editions") / "student"
INSTRUCTOR_DIR = Path("_build") / "editions" / "instructor"


@dataclass(frozen=True)
class Exercise:
    """One exercise as the statement cell's metadata declares it."""

    chapter: int
    id: str
    kind: str
    title: str
    setting: str
    minutes: int
    checker: str | None
    cell: int
    answer: str | None = None
    points: int = 0
    difficulty: int = 0
    tests: tuple = ()
    random_tests: int = 0
    forbidden: tuple = ()
    #: Partial credit per test case / likely cause (:func:`cmix_course.rubric.parse`).
    rubric: tuple = ()

    @property
    def stars(self) -> str:
        """The difficulty as stars: ★☆☆ to ★★★."""
        return stars(self.difficulty)


def stars(difficulty: int) -> str:
    """``1`` -> ``★☆☆``, ``3`` -> ``★★★``."""
    d = max(0, min(3, int(difficulty or 0)))
    return "★" * d + "☆" * (3 - d)


def exercise_line(ex: "Exercise") -> str:
    """The line under the statement's heading: difficulty, expected minutes and points."""
    return f"**Difficulty {stars(ex.difficulty)}** · about {ex.minutes} minutes · {ex.points} points"


def tags(cell) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def chapter_number(path: str | Path) -> int | None:
    """The chapter number from a notebook's file name (``09_cue_alignment.ipynb`` -> 9)."""
    m = re.match(r"(\d+)_", Path(path).name)
    return int(m.group(1)) if m else None


def _title(source: str) -> str:
    first = source.strip().splitlines()[0] if source.strip() else ""
    m = re.match(r"###\s+Exercise\s+\S+\s+\((\w+)\):\s*(.+)", first)
    return m.group(2).strip() if m else ""


def exercises(nb, chapter: int | None = None) -> list[Exercise]:
    """The exercises of a notebook, from the statement cells' ``cmix`` metadata (and, for the
    hidden tests and forbidden functions, the grading notes' metadata three cells later)."""
    found = []
    for k, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("cmix", {})
        if EXERCISE in tags(cell) and "exercise" in meta:
            notes = nb.cells[k + 3] if k + 3 < len(nb.cells) else None
            spec = dict(DEFAULT_TESTS)
            forbidden: tuple = ()
            rubric: tuple = ()
            if notes is not None and GRADING in tags(notes):
                nmeta = notes.get("metadata", {}).get("cmix", {})
                spec.update(nmeta.get("tests", {}))
                forbidden = tuple(nmeta.get("forbidden", ()))
                rubric = parse_rubric(nmeta.get("rubric"))
            tests = tuple([(int(s), "visible") for s in spec.get("visible", [0])]
                          + [(int(s), "hidden") for s in spec.get("hidden", [])])
            found.append(Exercise(chapter=chapter or 0, id=str(meta["exercise"]),
                                  kind=meta.get("kind", ""), title=_title(cell.source),
                                  setting=meta.get("setting", ""),
                                  minutes=int(meta.get("minutes", 0) or 0),
                                  checker=meta.get("checker"), cell=k,
                                  answer=meta.get("answer"),
                                  points=int(meta.get("points", 0) or 0),
                                  difficulty=int(meta.get("difficulty", 0) or 0),
                                  tests=tests, random_tests=int(spec.get("random", 0) or 0),
                                  forbidden=forbidden, rubric=rubric))
    return found


def _defined_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def worked_names(nb) -> dict[str, set[str]]:
    """For each computational exercise: its answer's name and the functions its worked cells
    define (:func:`cmix_course.worked.worked_names`)."""
    return worked.worked_names(nb, exercises(nb))


def answer_leaks(nb, names: dict[str, set[str]] | None = None) -> list[str]:
    """Code cells that show a computational exercise's answer above it (empty when none;
    :func:`cmix_course.worked.answer_leaks`). ``names``: another version's
    :func:`worked_names`, to check an older notebook."""
    return worked.answer_leaks(nb, exercises(nb), names)


def _check_exercise(nb, ex: Exercise, problems: list[str]) -> int:
    """Check the cells of one exercise; return the index of its last cell."""
    where = f"exercise {ex.id} (cell {ex.cell})"
    cells = nb.cells
    stmt = cells[ex.cell]
    if stmt.cell_type != "markdown":
        problems.append(f"{where}: the statement must be a markdown cell")
    head = stmt.source.strip().splitlines()[0] if stmt.source.strip() else ""
    if not re.match(rf"### Exercise {re.escape(ex.id)} \({ex.kind}\): \S", head):
        problems.append(f"{where}: the statement must begin '### Exercise {ex.id} ({ex.kind}): "
                        f"<title>', not {head[:60]!r}")
    if ex.kind not in KINDS:
        problems.append(f"{where}: kind must be one of {KINDS}, not {ex.kind!r}")
    if ex.setting not in SETTINGS:
        problems.append(f"{where}: setting must be one of {SETTINGS}, not {ex.setting!r}")
    if ex.minutes <= 0:
        problems.append(f"{where}: minutes must be a positive number")
    if ex.points <= 0:
        problems.append(f"{where}: points must be a positive number")
    if ex.difficulty not in DIFFICULTIES:
        problems.append(f"{where}: difficulty must be one of {DIFFICULTIES} (stars)")
    rest = [line.strip() for line in stmt.source.strip().splitlines()[1:] if line.strip()]
    if not rest or rest[0] != exercise_line(ex):
        problems.append(f"{where}: the line after the heading must be {exercise_line(ex)!r} "
                        f"(from the metadata), not {(rest[0] if rest else '')[:80]!r}")
    nxt = lambda k: cells[k] if k < len(cells) else None  # noqa: E731
    work, sol, grade = nxt(ex.cell + 1), nxt(ex.cell + 2), nxt(ex.cell + 3)
    if ex.kind == "computational":
        import cmix_course as E

        if not ex.checker or ex.checker not in E.__all__:
            problems.append(f"{where}: checker {ex.checker!r} is not exported by cmix_course")
        if not ex.answer or ex.answer not in _defined_names(work.source if work else ""):
            problems.append(f"{where}: metadata 'answer' must name the function the starter "
                            f"defines (the grader looks it up by that name), not {ex.answer!r}")
        if (work is None or work.cell_type != "code" or tags(work) != {EXERCISE}
                or STARTER_STUB not in work.source or f"{ex.checker}(" not in work.source):
            problems.append(f"{where}: the next cell must be the starter code (code, tag "
                            f"'exercise', containing '{STARTER_STUB}' and a call of {ex.checker})")
        if (sol is None or sol.cell_type != "code" or tags(sol) != {SOLUTION, "hide-input"}
                or not sol.source.startswith("# Solution") or f"{ex.checker}(" not in sol.source):
            problems.append(f"{where}: then the solution (code, tags 'solution' and 'hide-input', "
                            f"first line '# Solution', calling {ex.checker})")
    elif ex.kind == "interpretive":
        if work is None or work.cell_type != "markdown" or tags(work) != {EXERCISE, ANSWER} \
                or work.source.strip() != ANSWER_TEXT:
            problems.append(f"{where}: the next cell must be the answer cell (markdown, tags "
                            f"'exercise' and 'answer', text {ANSWER_TEXT!r})")
        if (sol is None or sol.cell_type != "markdown" or tags(sol) != {SOLUTION}
                or "{admonition} Model answer" not in sol.source
                or ":class: dropdown" not in sol.source):
            problems.append(f"{where}: then the model answer (markdown, tag 'solution', a "
                            f"':::{{admonition}} Model answer' with ':class: dropdown')")
    if (grade is None or grade.cell_type != "markdown" or tags(grade) != {GRADING, "remove-cell"}
            or not grade.source.startswith(GRADING_HEAD)):
        problems.append(f"{where}: then the grading notes (markdown, tags 'grading' and "
                        f"'remove-cell', beginning {GRADING_HEAD!r})")
    else:
        m = re.match(rf"{re.escape(GRADING_HEAD)}\s*(\d+)\s+points", grade.source)
        if not m or int(m.group(1)) != ex.points:
            problems.append(f"{where}: the grading notes must begin '{GRADING_HEAD} {ex.points} "
                            f"points' (the metadata's points)")
        problems += [f"{where}: {p}" for p in rubric_problems(ex.rubric, ex.points)]
    return ex.cell + 3


def check_notebook(nb, path: str | Path = "") -> list[str]:
    """Problems with the exercise format of one chapter notebook (empty when it is right)."""
    problems: list[str] = []
    chapter = chapter_number(path) if path else None
    found = exercises(nb, chapter)
    owned: set[int] = set()
    for ex in found:
        last = _check_exercise(nb, ex, problems)
        owned.update(range(ex.cell, last + 1))
    for k, cell in enumerate(nb.cells):
        if tags(cell) & {EXERCISE, SOLUTION, GRADING, ANSWER} and k not in owned:
            problems.append(f"cell {k}: tagged {sorted(tags(cell))} but not part of an exercise "
                            f"(statement, starter/answer, solution, grading notes)")
    # a starter's names must not be used outside its exercise: the student edition's reader
    # may leave them unwritten
    for ex in found:
        names = _defined_names(nb.cells[ex.cell + 1].source) if ex.kind == "computational" else set()
        for k, cell in enumerate(nb.cells):
            if k in owned or cell.cell_type != "code":
                continue
            used = {n for n in names if re.search(rf"\b{re.escape(n)}\b", cell.source)}
            if used:
                problems.append(f"cell {k} uses {sorted(used)} from exercise {ex.id}'s starter; "
                                f"in the student edition that is the reader's unfinished code")
    worked.check_worked(nb, found, problems)
    problems += worked.answer_leaks(nb, found)
    if chapter in EXERCISE_CHAPTERS:
        ids = [ex.id for ex in found]
        want = [f"{chapter}.{k}" for k in range(1, len(found) + 1)]
        if ids != want:
            problems.append(f"exercise numbers {ids}, expected {want}")
        kinds = {ex.kind for ex in found}
        if len(found) < 2 or not set(KINDS) <= kinds:
            problems.append(f"chapter {chapter} needs at least two exercises, one computational "
                            f"and one interpretive (has {[ex.kind for ex in found]})")
        meta = nb.metadata.get("cmix", {})
        if not meta.get("objectives") or not isinstance(meta.get("objectives"), list):
            problems.append("notebook metadata cmix.objectives: a list of learning objectives")
        if not isinstance(meta.get("prerequisites"), list):
            problems.append("notebook metadata cmix.prerequisites: a list")
        if not isinstance(meta.get("minutes"), int) or meta.get("minutes", 0) <= 0:
            problems.append("notebook metadata cmix.minutes: reading + exercises, in minutes")
    return problems


def _preprocess(nb, remove_tags: set[str], clear_outputs: bool):
    from nbconvert.preprocessors import ClearOutputPreprocessor, TagRemovePreprocessor

    nb = copy.deepcopy(nb)
    if remove_tags:
        nb, _ = TagRemovePreprocessor(remove_cell_tags=remove_tags, enabled=True).preprocess(nb, {})
    if clear_outputs:
        nb, _ = ClearOutputPreprocessor(enabled=True).preprocess(nb, {})
    return nb


def _banner(nb, text: str, edition: str):
    import nbformat

    nb.metadata.setdefault("cmix", {})["edition"] = edition
    cell = nbformat.v4.new_markdown_cell(text)
    # a fixed id (nbformat draws a random one), so that regenerating an edition changes nothing
    import hashlib
    cell.id = hashlib.sha256(f"{edition}-banner".encode()).hexdigest()[:8]
    cell.metadata["tags"] = ["edition-banner"]
    at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
    nb.cells.insert(at, cell)
    return nb


def student_edition(nb, source_name: str = ""):
    """The student edition: no ``solution`` or ``grading`` cells, no outputs, a banner.

    The notebook's metadata ``cmix.source`` names the chapter it was made from (the grader
    finds the instructor's copy by it when the file name does not say)."""
    out = _preprocess(nb, {SOLUTION, GRADING}, clear_outputs=True)
    if source_name:
        out.metadata.setdefault("cmix", {})["source"] = source_name
    for cell in out.cells:  # relative links: the edition sits two folders below the root
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace("](../", "](../../")
    return _banner(out, "> **Student edition** (generated by `make editions` from "
                        f"`notebooks/{source_name}`): solutions, model answers and grading notes "
                        "are left out. Run the cells in order; each exercise's checker reports "
                        "*not attempted* until you write your answer, and running the notebook "
                        "again never overwrites what you wrote. Keep each answer's function "
                        "name: the grader finds your answer by it and runs its own tests, "
                        "visible and hidden.", "student")


def instructor_edition(nb, source_name: str = ""):
    """The instructor edition: every cell (solutions, model answers, grading notes), no outputs."""
    out = _preprocess(nb, set(), clear_outputs=True)
    if source_name:
        out.metadata.setdefault("cmix", {})["source"] = source_name
    return _banner(out, "> **Instructor edition** (generated by `make editions` from "
                        f"`notebooks/{source_name}`): with solutions, model answers and grading "
                        "notes. Students get the student edition.", "instructor")


def chapter_notebooks(root: str | Path = ".") -> list[Path]:
    """The chapter notebooks that carry exercises (:data:`EXERCISE_CHAPTERS`: 2-16), in
    order."""
    paths = sorted(Path(root, "notebooks").glob("*.ipynb"))
    return [p for p in paths if chapter_number(p) in EXERCISE_CHAPTERS]


def write_editions(root: str | Path = ".", student_dir: str | Path | None = None,
                   instructor_dir: str | Path | None = None) -> dict[str, list[Path]]:
    """Write both editions of every chapter 2-16 (refuses a chapter with format
    problems)."""
    import nbformat

    root = Path(root)
    student_dir = Path(student_dir) if student_dir else root / STUDENT_DIR
    instructor_dir = Path(instructor_dir) if instructor_dir else root / INSTRUCTOR_DIR
    written: dict[str, list[Path]] = {"student": [], "instructor": []}
    sources = chapter_notebooks(root)
    bad = {p.name: check_notebook(nbformat.read(p, as_version=4), p) for p in sources}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        lines = [f"{name}: {msg}" for name, msgs in bad.items() for msg in msgs]
        raise ValueError("fix the exercise format first (python -m cmix_course check "
                         "notebooks/*.ipynb):\n" + "\n".join(lines))
    for d in (student_dir, instructor_dir):
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("*.ipynb"):
            old.unlink()
    for p in sources:
        nb = nbformat.read(p, as_version=4)
        for kind, make, d in (("student", student_edition, student_dir),
                              ("instructor", instructor_edition, instructor_dir)):
            out = make(nb, p.name)
            nbformat.validate(out)
            target = d / p.name
            nbformat.write(out, target)
            written[kind].append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    import nbformat

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("check", "build"):
        print("usage: python -m cmix_course.editions check NOTEBOOK... | build")
        return 2
    if argv[0] == "build":
        written = write_editions()
        for kind, paths in written.items():
            print(f"{kind} edition: {len(paths)} notebooks in {paths[0].parent if paths else '-'}")
        return 0
    status = 0
    for name in argv[1:]:
        nb = nbformat.read(name, as_version=4)
        problems = check_notebook(nb, name)
        found = exercises(nb, chapter_number(name))
        summary = ", ".join(f"{e.id} {e.kind}" for e in found) or "no exercises"
        print(f"{name}: {'OK' if not problems else f'{len(problems)} problem(s)'} ({summary})")
        for msg in problems:
            print(f"  - {msg}")
        status |= bool(problems)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
