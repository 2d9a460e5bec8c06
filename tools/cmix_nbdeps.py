"""Sphinx extension for the book build: a notebook (``.ipynb`` or a MyST Markdown notebook such as
``book/instructors.md``) is re-executed when the library code it can import changes, not only
when its own cells change.

myst-nb's execution cache (``execute_notebooks: cache``, jupyter-cache in
``_build/.jupyter_cache``) matches a notebook by its code cells, and Sphinx re-reads a page only
when its source file changed. A change inside ``cmixlib`` (a method's math, a label) would
therefore leave the old outputs on the site. This extension keys every notebook on

* the code (:func:`cmixlib.cache.code_text`: docstrings and comments left out) of every
  ``cmixlib`` module its cells can import, transitively (:func:`cmixlib.cache.import_closure`),
* the package's data files (``cmixlib/**`` other than ``.py``: the adapted MLM's weights, the
  explorer's script) and the repository's ``data/`` folder, by content,
* ``CMIX_MODEL`` and ``CMIX_QUICK`` (which model and which sizes the chapter runs with).

On ``env-get-outdated`` (before Sphinx reads anything) a notebook whose key differs from the one
stored in the build environment is marked outdated and its jupyter-cache record is removed, so
myst-nb executes it again; an unchanged tree re-renders from the cache. A notebook whose record
was made after Sphinx last read its page (``tools/run_notebooks.py`` executes the notebooks in
parallel before the build, with these keys: :func:`current_keys`) is marked outdated too, so
the page shows the new outputs.

Loaded by ``_config.yml`` (``sphinx: local_extensions``). Settings: ``cmix_nbdeps_package``
(the package folder; default: cmixlib's) and ``cmix_nbdeps_data`` (extra folders hashed by
content, relative to the book's root; default ``["data"]``), both for tests.
"""
from __future__ import annotations

import ast
import datetime
import functools
import hashlib
import json
import os
import re
from pathlib import Path

from sphinx.util import logging

from cmixlib import cache

LOGGER = logging.getLogger(__name__)
ENV_VARS = ("CMIX_MODEL", "CMIX_QUICK")
_MAGIC = re.compile(r"^\s*[%!]")
#: Notebook path -> the key its cached outputs were made with, beside the jupyter-cache database.
KEYS_FILE = "cmix_nbdeps.json"
#: Defaults of the settings ``cmix_nbdeps_data`` and ``cmix_nbdeps_extra_packages``.
DEFAULT_DATA = ["data"]
DEFAULT_EXTRA_PACKAGES = ["cmix_course"]


def _read_notebook(path: Path) -> dict:
    """The notebook at ``path``: ``.ipynb`` JSON, or a MyST Markdown notebook (a ``.md`` page with a
    ``kernelspec`` in its front matter, whose ``{code-cell}`` blocks myst-nb executes)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        return json.loads(text)
    from myst_nb.core.read import read_myst_markdown_notebook

    return read_myst_markdown_notebook(text)


def is_executed_notebook(path: Path) -> bool:
    """True for an ``.ipynb`` file and for a MyST Markdown notebook (``kernelspec`` front matter)."""
    if path.suffix == ".ipynb":
        return True
    if path.suffix != ".md":
        return False
    text = path.read_text(encoding="utf-8")
    return text.startswith("---") and "kernelspec:" in text.split("\n---", 1)[0]


def notebook_imports(path: Path) -> set[str]:
    """Dotted names imported anywhere in the code cells of the notebook at ``path`` (IPython
    magics and shell lines are dropped; a cell that still does not parse is skipped)."""
    nb = _read_notebook(path)
    names: set[str] = set()
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        src = "\n".join("" if _MAGIC.match(line) else line for line in src.splitlines())
        try:
            names |= cache.imported_names(ast.parse(src))
        except SyntaxError:
            continue
    return names


def _data_digest(package_dir: Path, folders: list[Path]) -> str:
    h = hashlib.sha256()
    files = [p for p in package_dir.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")]
    for folder in folders:
        files += [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    for p in sorted(f for f in files if "__pycache__" not in f.parts):
        h.update(p.as_posix().encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def _code_digest(path: Path, mtime_ns: int) -> bytes:
    """sha256 of :func:`cmixlib.cache.code_text` of one file (memoised per modification time)."""
    return hashlib.sha256(cache.code_text(path).encode()).digest()


def notebook_key(path: Path, package_dir: Path = cache.PACKAGE_DIR, data_digest: str = "",
                 extra_packages: tuple[Path, ...] = ()) -> str:
    """Hash of what the executed notebook at ``path`` depends on besides its own cells: the code of
    every module of ``package_dir`` (and of each of ``extra_packages``, e.g. the course package
    ``cmix_course`` whose checkers the chapters call) it can import, ``data_digest`` and
    :data:`ENV_VARS`."""
    imported = notebook_imports(path)
    h = hashlib.sha256(data_digest.encode())
    for pkg in (package_dir, *extra_packages):
        roots = {n for n in imported if n.split(".")[0] == pkg.name}
        for f in cache.import_closure(roots, pkg):
            h.update(f"{pkg.name}/{f.relative_to(pkg).as_posix()}".encode() + b"\0")
            h.update(_code_digest(f, f.stat().st_mtime_ns))
    for var in ENV_VARS:
        h.update(f"{var}={os.environ.get(var, '')}\0".encode())
    return h.hexdigest()[:16]


def remove_cache_record(cache_path: Path, notebook: Path) -> bool:
    """Remove the jupyter-cache records at ``cache_path`` made from ``notebook``; True if any."""
    from jupyter_cache import get_cache

    if not cache_path.exists():
        return False
    jc = get_cache(str(cache_path))
    removed = False
    for record in jc.list_cache_records():
        if Path(record.uri).resolve() == notebook.resolve():
            jc.remove_cache(record.pk)
            removed = True
    return removed


def record_times(cache_path: Path) -> dict[str, int]:
    """Resolved notebook path -> when its newest jupyter-cache record was made, in microseconds
    since the epoch (Sphinx's ``env.all_docs`` unit)."""
    from jupyter_cache import get_cache

    if not cache_path.exists():
        return {}
    times: dict[str, int] = {}
    for record in get_cache(str(cache_path)).list_cache_records():
        made = record.created if record.created.tzinfo else record.created.replace(
            tzinfo=datetime.timezone.utc)              # jupyter-cache stores UTC
        path = str(Path(record.uri).resolve())
        times[path] = max(times.get(path, 0), int(made.timestamp() * 1_000_000))
    return times


def read_keys(cache_path: Path) -> dict[str, str]:
    """The stored keys (:data:`KEYS_FILE` beside the jupyter-cache at ``cache_path``)."""
    keys_file = cache_path / KEYS_FILE
    return json.loads(keys_file.read_text()) if keys_file.exists() else {}


def write_keys(cache_path: Path, keys: dict[str, str]) -> None:
    cache_path.mkdir(parents=True, exist_ok=True)
    (cache_path / KEYS_FILE).write_text(json.dumps(keys, indent=1, sort_keys=True))


def current_keys(srcdir: Path, paths, package: str | Path = "", data=DEFAULT_DATA,
                 extra_packages=DEFAULT_EXTRA_PACKAGES) -> dict[str, str]:
    """``str(resolved path) -> notebook_key`` of each executed notebook among ``paths``, with the
    extension's settings (``package``: ``cmix_nbdeps_package``, ``data``: ``cmix_nbdeps_data``,
    ``extra_packages``: ``cmix_nbdeps_extra_packages``; folders relative to ``srcdir``). Used by
    :func:`mark_outdated` and by ``tools/run_notebooks.py``, which executes the notebooks before
    the build."""
    package_dir = Path(package or cache.PACKAGE_DIR).resolve()
    digest = _data_digest(package_dir, [Path(srcdir) / f for f in data])
    extra = tuple(p for p in (Path(srcdir) / name for name in extra_packages) if p.is_dir())
    return {str(p): notebook_key(p, package_dir, digest, extra)
            for p in (Path(x).resolve() for x in paths) if is_executed_notebook(p)}


def mark_outdated(app, env, added, changed, removed) -> list[str]:
    """``env-get-outdated``: notebooks whose dependency key differs from the one their cached
    outputs were made with get their jupyter-cache record removed; those Sphinx would not re-read
    on its own are returned as outdated. The keys are kept beside the cache
    (:data:`KEYS_FILE`), written as soon as a stale record is gone, so an interrupted build
    never leaves old outputs under a new key."""
    docs = {str(Path(env.doc2path(d)).resolve()): d for d in sorted(env.found_docs)}
    keys = current_keys(Path(app.srcdir), list(docs), app.config.cmix_nbdeps_package,
                        app.config.cmix_nbdeps_data, app.config.cmix_nbdeps_extra_packages)
    cache_path = Path(env.mystnb_config.execution_cache_path)
    stored = read_keys(cache_path)
    created = record_times(cache_path)
    outdated = []
    for path, key in keys.items():
        docname = docs[path]
        if stored.get(path) == key:
            # outputs cached after the page was last read (by tools/run_notebooks.py, before
            # the build): Sphinx must read the page again to show them
            read = env.all_docs.get(docname)
            if (read is not None and created.get(path, 0) > read
                    and docname not in added and docname not in changed):
                outdated.append(docname)
            continue
        if remove_cache_record(cache_path, Path(path)):
            LOGGER.info(f"cmix_nbdeps: the library code or data of {docname} changed: "
                        "re-executing")
            if docname not in added and docname not in changed:
                outdated.append(docname)
        stored[path] = key
    write_keys(cache_path, stored)
    return outdated


def setup(app):
    app.add_config_value("cmix_nbdeps_package", "", "env")
    app.add_config_value("cmix_nbdeps_data", DEFAULT_DATA, "env")
    app.add_config_value("cmix_nbdeps_extra_packages", DEFAULT_EXTRA_PACKAGES, "env")
    app.connect("env-get-outdated", mark_outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
