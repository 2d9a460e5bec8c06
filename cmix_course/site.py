"""The built book, as students get it (run by ``make book`` after Jupyter Book, and by
``make book-student``).

:func:`serve_student_edition` makes the buttons of chapters 2-16 (the chapters with
exercises, :data:`cmix_course.editions.EXERCISE_CHAPTERS`) hand out the student
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
    """Point the download and Colab buttons of chapters 2-16 at the student edition; returns
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
    for div in soup.select("div.tag_solution, div.tag-solution"):
        div.decompose()
        removed += 1
    for div in soup.select("div.admonition"):
        title = div.find(class_="admonition-title")
        if title is not None and title.get_text(strip=True).startswith("Model answer"):
            div.decompose()
            removed += 1
    return str(soup), removed


#: The instructors' page (docname), replaced by a stub in the students' site.
INSTRUCTORS = "book/instructors"
STUB = ("<h1>For instructors</h1><p>The instructors' guide (grading, hidden tests, model "
        "answers) is not part of the students' edition of this book.</p>")


def _main_text(html: str) -> str:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    main = soup.select_one("article") or soup.select_one("[role=main]") or soup.body or soup
    return main.get_text(" ")


def _stub_page(html: str) -> str:
    """The instructors' page with its content replaced by :data:`STUB` (navigation kept)."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    main = soup.select_one("article") or soup.select_one("[role=main]") or soup.body
    main.clear()
    main.append(BeautifulSoup(STUB, "html.parser"))
    return str(soup)


def reindex(html_dir: str | Path, pages: dict[str, str]) -> bool:
    """Rewrite Sphinx's search index (``searchindex.js``) for the changed ``pages``
    (docname -> the page's new text): every word of their old text is dropped and the words
    of the new text indexed as Sphinx does (its English splitter, stemmer and word filter),
    so that nothing removed from a page can still be found. Returns whether an index was
    there."""
    import json

    from sphinx.search.en import SearchEnglish

    path = Path(html_dir) / "searchindex.js"
    if not path.is_file():
        return False
    raw = path.read_text(encoding="utf-8")
    index = json.loads(raw[raw.index("(") + 1:raw.rindex(")")])
    lang = SearchEnglish({})
    docs = index.get("docnames", [])
    for docname, text in pages.items():
        if docname not in docs:
            continue
        i = docs.index(docname)
        terms = index.setdefault("terms", {})
        for term, value in list(terms.items()):
            ids = value if isinstance(value, list) else [value]
            if i in ids:
                ids = [x for x in ids if x != i]
                if ids:
                    terms[term] = ids if len(ids) > 1 else ids[0]
                else:
                    del terms[term]
        for word in lang.split(text):
            stemmed = lang.stem(word).lower()
            if not lang.word_filter(stemmed) and lang.word_filter(word):
                stemmed = word
            if lang.word_filter(stemmed):
                ids = terms.get(stemmed, [])
                ids = ids if isinstance(ids, list) else [ids]
                if i not in ids:
                    terms[stemmed] = sorted([*ids, i]) if ids else i
    path.write_text("Search.setIndex(" + json.dumps(index, ensure_ascii=False,
                                                    separators=(",", ":")) + ")",
                    encoding="utf-8")
    return True


def strip_solutions(html_dir: str | Path, out_dir: str | Path, root: str | Path = ".") -> int:
    """Copy the site ``html_dir`` to ``out_dir`` without solutions (the chapter pages of
    chapters 2-16 stripped, their downloads and Colab links the student edition), the
    instructors' page replaced by a stub (its source too) and the search index rewritten
    for the changed pages (:func:`reindex`); returns the number of solution blocks removed."""
    html_dir, out_dir = Path(html_dir), Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    shutil.copytree(html_dir, out_dir)
    serve_student_edition(out_dir, root)
    removed = 0
    changed: dict[str, str] = {}
    for p in chapter_notebooks(root):
        student = Path(root) / STUDENT_DIR / p.name
        for source in (out_dir / "_sources" / "notebooks").glob(f"{p.stem}.*"):
            if student.is_file():                 # any other copy of the chapter's source
                shutil.copyfile(student, source)
        page = out_dir / "notebooks" / f"{p.stem}.html"
        if page.is_file():
            text, n = _strip_page(page.read_text(encoding="utf-8"))
            page.write_text(text, encoding="utf-8")
            changed[f"notebooks/{p.stem}"] = _main_text(text)
            removed += n
    page = out_dir / f"{INSTRUCTORS}.html"
    if page.is_file():
        text = _stub_page(page.read_text(encoding="utf-8"))
        page.write_text(text, encoding="utf-8")
        changed[INSTRUCTORS] = _main_text(text)
    for source in (out_dir / "_sources").glob(f"{INSTRUCTORS}.*"):
        source.write_text("# For instructors\n\nNot part of the students' edition.\n",
                          encoding="utf-8")
    reindex(out_dir, changed)
    return removed
