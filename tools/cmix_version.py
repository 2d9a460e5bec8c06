"""Sphinx extension: every page's footer says which cmixlib version and commit the site was
built from (the version from ``cmixlib.__version__``, the commit from ``git describe``, with
"+changes" when the work tree differs from it; "no git checkout" otherwise).

Loaded by ``_config.yml`` (``sphinx: local_extensions``). Only the footer (an HTML-level
setting) changes from commit to commit, so a new commit re-writes the pages without re-reading
or re-executing any notebook.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_version() -> str:
    """``cmixlib.__version__``, read from the source (no import of the package and torch)."""
    text = (ROOT / "cmixlib" / "__init__.py").read_text(encoding="utf-8")
    m = re.search(r'^__version__\s*=\s*"([^"]+)"', text, flags=re.M)
    return m.group(1) if m else "unknown"


def commit() -> str:
    """The short commit of the work tree, "+changes" if it has uncommitted changes to tracked
    files; "no git checkout" where git or the repository is missing."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              check=True, timeout=20).stdout.strip()
    try:
        sha = git("rev-parse", "--short=10", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "no git checkout"
    return sha + ("+changes" if dirty else "")


def stamp() -> str:
    """The footer line, e.g. "cmixlib 1.0.0.dev0, commit 0123456789"."""
    return f"cmixlib {package_version()}, commit {commit()}"


def add_stamp(app, config) -> None:
    options = dict(config.html_theme_options or {})
    footer = options.get("extra_footer", "")
    options["extra_footer"] = (f"{footer}<br>" if footer else "") + stamp()
    config.html_theme_options = options


def setup(app):
    app.connect("config-inited", add_stamp)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
