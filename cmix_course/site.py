"""The built book, as students get it (run by ``make book`` after Jupyter Book, and by
``make book-student``).

:func:`serve_student_edition` makes the buttons of chapters 2-14 hand out the student
edition: Jupyter Book's download button serves ``_build/html/_sources/notebooks/<chapter>.ipynb``,
a copy of the chapter's source with its solutions and grading notes, which is replaced by
``editions/student/<chapter>.ipynb``; its Colab button opens ``.../blob/<branch>/notebooks/
<chapter>.ipynb`` in the repository, rewritten to ``editions/student/<chapter>.ipynb``.

On the pages themselves the solutions are collapsed until the reader opens them (solution
code: the ``hide-input`` tag; model answers: ``dropdown`` admonitions; grading notes:
``remove-cell``, never on the page). :func:`strip_solutions` writes a copy of the site with no
solution at all: the code cells tagged ``solution`` (myst-nb gives their HTML the class
``tag_solution``) and the "Model answer" boxes are removed from the chapter pages.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from .editions import STUDENT_DIR, chapter_notebooks

COLAB = re.compile(r"(https://colab\.research\.google\.com/github/[^\"'\s<>]+?/blob/[^/\"'\s<>]+/)"
                   r"notebooks/([^/\"'\s<>]+\.ipynb)")


def serve_student_edition(html_dir: str | Path, root: str | Path = ".") -> list[Path]:
    """Point the download and Colab buttons of chapters 2-14 at the student edition; returns
    the files changed. Chapters without a student edition are left alone."""
    html_dir, root = Path(html_dir), Path(root)
    changed = []
    names = {p.name for p in chapter_notebooks(root) if (root / STUDENT_DIR / p.name).is_file()}
    for name in sorted(names):
        for source in (html_dir / "_sources" / "notebooks" / name,
                       html_dir / "_sources" / "notebooks" / f"{name}.txt"):   # Sphinx's own copy
            if source.is_file():
                shutil.copyfile(root / STUDENT_DIR / name, source)
                changed.append(source)
        page = html_dir / "notebooks" / f"{Path(name).stem}.html"
        if page.is_file():
            text = page.read_text(encoding="utf-8")
            new = COLAB.sub(lambda m: (m.group(1) + STUDENT_DIR.as_posix() + "/" + m.group(2))
                            if m.group(2) in names else m.group(0), text)
            if new != text:
                page.write_text(new, encoding="utf-8")
                changed.append(page)
    return changed


def _strip_page(html: str) -> tuple[str, int]:
    """The page without solution cells and model answers, and how many were removed."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    removed = 0
    for div in soup.select("div.tag_solution"):
        div.decompose()
        removed += 1
    for div in soup.select("div.admonition"):
        title = div.find(class_="admonition-title")
        if title is not None and title.get_text(strip=True).startswith("Model answer"):
            div.decompose()
            removed += 1
    return str(soup), removed


def strip_solutions(html_dir: str | Path, out_dir: str | Path, root: str | Path = ".") -> int:
    """Copy the site ``html_dir`` to ``out_dir`` without solutions (the chapter pages of
    chapters 2-14 stripped, their downloads and Colab links the student edition); returns the
    number of solution blocks removed."""
    html_dir, out_dir = Path(html_dir), Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    shutil.copytree(html_dir, out_dir)
    serve_student_edition(out_dir, root)
    removed = 0
    for p in chapter_notebooks(root):
        page = out_dir / "notebooks" / f"{p.stem}.html"
        if page.is_file():
            text, n = _strip_page(page.read_text(encoding="utf-8"))
            page.write_text(text, encoding="utf-8")
            removed += n
    return removed
