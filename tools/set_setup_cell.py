#!/usr/bin/env python3
"""Rewrite the first code cell of chapters into the book's three-line setup cell (idempotent).

The cell, for a chapter that imports ``setup_notebook, quick_mode, sized`` from cmixlib.book.notebook::

    import os, sys; R = "<REPO_URL>"  # in Colab:
    "google.colab" in sys.modules and exec(os.popen(f"curl -sL {R}/raw/HEAD/colab").read())
    from cmixlib.book import setup_notebook, quick_mode, sized; run_info = setup_notebook()

Line 1 names the repository (``cmixlib.book.notebook.REPO_URL``; ``tools/set_repo_url.py`` changes it).
Line 2 does something in Google Colab only: it runs the repository's ``colab`` file, which
clones the repository into ``/content``, installs it once per runtime (``cmixlib/book/notebook.py
install``) and puts the clone on ``sys.path``. Line 3 is the chapter's own import from
``cmixlib.book.notebook`` (kept as it is: the names a chapter imports do not change) and the setup call
(``setup_notebook()``: seed 0, its default). Every line fits the book's 88 columns; a chapter
whose import line is too long for that is refused with what to do.

Usage::

    python tools/set_setup_cell.py notebooks/02_encoder_layer.ipynb [more notebooks ...]

Each notebook is read from disk right before it is rewritten and written in one operation;
only the first code cell's source changes (its metadata, id and outputs stay).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 88
BOOTSTRAP = '"google.colab" in sys.modules and exec(os.popen(f"curl -sL {R}/raw/HEAD/colab").read())'
IMPORT = re.compile(r"^from cmixlib\.book import ([\w, ]+?)(?:;.*)?$", re.M)


def repo_url() -> str:
    """``REPO_URL`` of cmixlib/book/notebook.py (read from its source: no import needed)."""
    text = (ROOT / "cmixlib" / "book" / "notebook.py").read_text(encoding="utf-8")
    match = re.search(r'^REPO_URL = "([^"]+)"', text, re.M)
    if not match:
        raise SystemExit("cmixlib/book/notebook.py has no REPO_URL line")
    return match.group(1)


def setup_cell(names: str, url: str) -> str:
    """The three lines for a chapter importing ``names`` (e.g. "setup_notebook, sized")."""
    if "setup_notebook" not in [n.strip() for n in names.split(",")]:
        raise ValueError(f"the import line must import setup_notebook (it imports {names})")
    lines = [f'import os, sys; R = "{url}"  # in Colab:', BOOTSTRAP,
             f"from cmixlib.book import {names}; run_info = setup_notebook()"]
    for line in lines:
        if len(line) > MAX_LINE:
            raise ValueError(f"{len(line)} characters, more than {MAX_LINE}: {line!r} (import "
                             "fewer names in the setup cell and the rest in a later cell)")
    return "\n".join(lines)


def rewrite(path: Path, url: str) -> bool:
    """Rewrite the first code cell of ``path``; True if the file changed."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    cell = next((c for c in nb["cells"] if c["cell_type"] == "code"), None)
    if cell is None:
        raise ValueError(f"{path}: no code cell")
    source = "".join(cell["source"])
    match = IMPORT.search(source)
    if match is None:
        raise ValueError(f"{path}: the first code cell has no 'from cmixlib.book import ...' line")
    new = setup_cell(match.group(1).strip(), url)
    if new == source:
        return False
    cell["source"] = new.splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("Usage::")[1].strip().splitlines()[0].strip(), file=sys.stderr)
        return 2
    url = repo_url()
    try:
        changed = [p for p in map(Path, argv) if rewrite(p, url)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"setup cell rewritten in {len(changed)} of {len(argv)} notebooks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
