"""The instructors' page, read from the chapter notebooks themselves (one source): each
chapter's learning objectives, prerequisites and time (notebook metadata ``cmix``), its exercises
with their difficulty, expected minutes and points (the statement cells' metadata,
:mod:`.editions`) and the Colab links of the student edition."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .editions import STUDENT_DIR, chapter_notebooks, chapter_number, exercises


def _title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("# "):
            return cell.source.lstrip()[2:].splitlines()[0].strip()
    return ""


def colab_url(name: str, edition_dir: Path = STUDENT_DIR, branch: str = "main") -> str:
    """Colab's URL for a notebook of the repository (:data:`cmixlib.book.notebook.REPO_URL`)."""
    from cmixlib.book import REPO_URL

    repo = REPO_URL.removeprefix("https://github.com/").rstrip("/")
    return (f"https://colab.research.google.com/github/{repo}/blob/{branch}/"
            f"{edition_dir.as_posix()}/{name}")


def chapters(root: str | Path = ".") -> pd.DataFrame:
    """One row per chapter with exercises (2-16): number, file, title, minutes,
    objectives, prerequisites, exercise counts by kind and the student edition's Colab link."""
    import nbformat

    rows = []
    for path in chapter_notebooks(root):
        nb = nbformat.read(path, as_version=4)
        meta = nb.metadata.get("cmix", {})
        exs = exercises(nb, chapter_number(path))
        rows.append({"chapter": chapter_number(path), "file": path.stem, "title": _title(nb),
                     "minutes": meta.get("minutes"),
                     "objectives": list(meta.get("objectives", [])),
                     "prerequisites": list(meta.get("prerequisites", [])),
                     "computational": sum(e.kind == "computational" for e in exs),
                     "interpretive": sum(e.kind == "interpretive" for e in exs),
                     "colab": colab_url(path.name)})
    return pd.DataFrame(rows)


def exercise_table(root: str | Path = ".") -> pd.DataFrame:
    """One row per exercise of chapters 2-16: id, chapter, kind, title, difficulty (stars),
    setting, minutes, points and how it is graded (the checker's name with its hidden tests, or
    by hand against the model answer)."""
    import nbformat

    rows = []
    for path in chapter_notebooks(root):
        nb = nbformat.read(path, as_version=4)
        for ex in exercises(nb, chapter_number(path)):
            n_hidden = sum(v == "hidden" for _, v in ex.tests) + ex.random_tests
            graded = (f"`{ex.checker}` on `{ex.answer}`: 1 visible + {n_hidden} hidden tests"
                      if ex.kind == "computational" else "by hand, against the model answer")
            rows.append({"exercise": ex.id, "chapter": ex.chapter, "kind": ex.kind,
                         "title": ex.title, "difficulty": ex.stars, "setting": ex.setting,
                         "minutes": ex.minutes, "points": ex.points, "graded": graded})
    return pd.DataFrame(rows)


def chapter_markdown(root: str | Path = ".") -> str:
    """The per-chapter section of the instructors' page, as Markdown."""
    out = []
    for row in chapters(root).itertuples(index=False):
        out.append(f"### Chapter {row.chapter}: {row.title}\n")
        out.append(f"*Time:* about {row.minutes} minutes (reading and exercises). "
                   f"*Exercises:* {row.computational} computational, {row.interpretive} "
                   f"interpretive. *Student edition:* [open in Colab]({row.colab}).\n")
        out.append("*Prerequisites:* " + ("; ".join(row.prerequisites) or "none") + ".\n")
        out.append("*After this chapter students can:*\n")
        out.extend(f"- {o}" for o in row.objectives)
        out.append("")
    return "\n".join(out)


def exercise_markdown(root: str | Path = ".") -> str:
    """The exercise table of the instructors' page, as a Markdown table."""
    df = exercise_table(root)
    head = ("| exercise | kind | title | difficulty | minutes | points | suits | graded |\n"
            "|---|---|---|---|---|---|---|---|")
    lines = [f"| {r.exercise} | {r.kind} | {r.title} | {r.difficulty} | {r.minutes} | "
             f"{r.points} | {r.setting} | {r.graded} |" for r in df.itertuples(index=False)]
    return "\n".join([head, *lines])
