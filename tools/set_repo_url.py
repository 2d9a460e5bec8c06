#!/usr/bin/env python3
"""Point the book at the repository where it is hosted, in every place that names it.

The URL appears in ``_config.yml`` (``repository.url``: launch and repository buttons),
``cmixlib/book/notebook.py`` (``REPO_URL``) and the first cell of every notebook (the Colab clone);
``tests/test_colab.py`` checks that they agree. Usage::

    python tools/set_repo_url.py https://github.com/OWNER/NAME
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def current_url() -> str:
    match = re.search(r'^REPO_URL = "([^"]+)"', (ROOT / "cmixlib" / "book" / "notebook.py").read_text(), re.M)
    if not match:
        raise SystemExit("cmixlib/book/notebook.py has no REPO_URL line")
    return match.group(1)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", argv[0]):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        print("The URL must look like https://github.com/OWNER/NAME (Colab opens notebooks from GitHub).",
              file=sys.stderr)
        return 2
    old, new = current_url(), argv[0]
    files = [ROOT / "_config.yml", ROOT / "cmixlib" / "book" / "notebook.py", *sorted((ROOT / "notebooks").glob("*.ipynb")),
             *sorted((ROOT / "editions" / "student").glob("*.ipynb"))]
    changed = 0
    for path in files:
        text = path.read_text()
        if old in text:
            path.write_text(text.replace(old, new))
            changed += 1
    print(f"{old} -> {new} in {changed} files")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
