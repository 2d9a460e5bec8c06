"""Execute the book's notebooks in parallel into Jupyter Book's execution cache, before the build.

``make book`` runs ``python tools/run_notebooks.py --jobs $(JOBS)`` before
``jupyter-book build``: the notebooks of ``_toc.yml`` whose cached outputs are not current are
executed by ``JOBS`` worker processes taking them from one queue (in the order of the table of
contents), and each result is stored in the jupyter-cache that myst-nb reads
(``_build/.jupyter_cache``), so the build then only renders from the cache.

Executed exactly as myst-nb's ``execute_notebooks: cache`` mode would (myst_nb.core.execute.cache):
the settings come from ``_config.yml`` through Jupyter Book's own translation
(``jupyter_book.config.get_final_config``, the ``nb_*`` values myst-nb reads); the notebook is
read by myst-nb's readers (``.ipynb``, MyST Markdown notebooks), its kernel name passes through
``nb_kernel_rgx_aliases`` and its ``mystnb`` metadata overrides the settings; the same call,
``jupyter_cache.executors.utils.single_nb_execution`` (timeout, ``allow_errors``, cwd = the
notebook's folder unless ``run_in_temp``, nbclient's ``raises-exception`` tag), and the same
cache record (``cache_notebook_bundle`` with ``execution_seconds``). A notebook matched in the
cache or excluded by ``execute.exclude_patterns`` is skipped.

The extension ``tools/cmix_nbdeps.py`` keys each notebook on the cmixlib code and data it can
import; this script uses its functions: a notebook whose key changed has its old record removed
and its new key stored (before it is executed, as the extension does), so the extension then
finds every key current and neither deletes the fresh records nor keeps stale ones.

Threads: with ``--jobs`` N > 1 every kernel gets ``OMP_NUM_THREADS`` = cores // N (unless it is
set already), so that N kernels do not oversubscribe the cores. A failing notebook (a cell that
raises without the ``raises-exception`` tag, or a timeout) is not cached; its traceback is
printed, the other notebooks still run, and the script exits with status 1.

Usage: ``python tools/run_notebooks.py [--jobs N] [BOOK_ROOT]``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path, PurePosixPath

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cmix_nbdeps  # noqa: E402


def book_config(root: Path) -> dict:
    """The Sphinx configuration Jupyter Book builds ``root`` with (as ``jupyter-book config
    sphinx`` shows it)."""
    import click
    from jupyter_book.cli.main import build
    from jupyter_book.config import get_final_config

    with click.Context(build) as ctx:
        path_config, source, overrides = ctx.invoke(build, path_source=str(root),
                                                    get_config_only=True)
    config, _ = get_final_config(user_yaml=Path(path_config) if path_config else None,
                                 sourcedir=Path(source), cli_config=overrides)
    return config


def parser_configs(config: dict, root: Path):
    """``(NbParserConfig, MdParserConfig)`` as myst-nb builds them from the Sphinx configuration
    (``myst_nb.sphinx_ext.create_mystnb_config``); the cache folder defaults to
    ``_build/.jupyter_cache`` (beside ``_build/html``)."""
    from myst_nb.core.config import NbParserConfig
    from myst_parser.config.main import MdParserConfig

    nb_values = {name: config[f"nb_{name}"] for name, _, field in NbParserConfig().as_triple()
                 if not field.metadata.get("sphinx_exclude") and f"nb_{name}" in config}
    nb_config = NbParserConfig(**nb_values)
    if not nb_config.execution_cache_path:
        nb_config = nb_config.copy(
            execution_cache_path=str((root / "_build" / ".jupyter_cache").resolve()))
    md_values = {f.name: config[f"myst_{f.name}"] for f in dataclasses.fields(MdParserConfig)
                 if f"myst_{f.name}" in config and not f.metadata.get("sphinx_exclude")}
    return nb_config, MdParserConfig(**md_values)


def toc_files(root: Path, config: dict) -> list[Path]:
    """The files of the table of contents (``external_toc_path``), in its order."""
    from sphinx_external_toc.parsing import parse_toc_yaml

    site_map = parse_toc_yaml(root / config.get("external_toc_path", "_toc.yml"))
    files = []
    for docname in site_map:
        found = [root / f"{docname}{s}" for s in (".ipynb", ".md", ".rst")
                 if (root / f"{docname}{s}").is_file()]
        files += found[:1]
    return files


def read_notebook(path: Path, md_config, nb_config):
    """``(notebook, read_fmt, nb_config)`` as myst-nb's parser has them just before execution."""
    from myst_nb.core.read import create_nb_reader
    from myst_nb.core.nb_to_tokens import nb_node_to_dict

    text = path.read_text(encoding="utf-8")
    reader = create_nb_reader(str(path), md_config, nb_config, text)
    notebook = reader.read(text)
    kernel = notebook.metadata.get("kernelspec", {}).get("name", None)
    if kernel is not None:
        for rgx, alias in (nb_config.kernel_rgx_aliases or {}).items():
            if re.fullmatch(rgx, kernel):
                notebook.metadata["kernelspec"]["name"] = alias
                break
    if nb_config.metadata_key in notebook.metadata:
        overrides = nb_node_to_dict(notebook.metadata[nb_config.metadata_key])
        overrides.pop("output_folder", None)
        nb_config = nb_config.copy(**overrides)
    return notebook, reader.read_fmt, nb_config


def _execute(text: str, cwd: str | None, timeout, allow_errors: bool, threads: int | None):
    """Worker: run one notebook (JSON text) as myst-nb does, in ``cwd`` (None: a temporary
    folder); ``(notebook JSON, seconds, traceback or None)``."""
    import tempfile
    import traceback
    from contextlib import nullcontext

    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    if threads and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(threads)      # inherited by the kernel
    nb = nbformat.reads(text, as_version=4)
    start = time.perf_counter()
    try:
        with (tempfile.TemporaryDirectory() if cwd is None else nullcontext(cwd)) as folder:
            result = single_nb_execution(nb, cwd=os.path.abspath(folder),
                                         allow_errors=allow_errors, timeout=timeout,
                                         meta_override=True)
    except Exception:                       # e.g. a dead kernel: myst-nb would stop there too
        return text, time.perf_counter() - start, traceback.format_exc()
    return nbformat.writes(result.nb), result.time, result.exc_string if result.err else None


def run_notebooks(root: Path, jobs: int = 2, log=print) -> dict[str, list[str]]:
    """Execute the notebooks of the book at ``root`` whose cached outputs are not current, with
    ``jobs`` worker processes; returns ``{"executed": [...], "cached": [...], "failed": [...]}``
    (paths relative to ``root``)."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.cache.db import NbProjectRecord

    root = Path(root).absolute()
    config = book_config(root)
    nb_config, md_config = parser_configs(config, root)
    done: dict[str, list[str]] = {"executed": [], "cached": [], "failed": []}
    if nb_config.execution_mode != "cache":
        log(f"run_notebooks: execute_notebooks is {nb_config.execution_mode!r}, not 'cache': "
            "nothing to do, the build executes")
        return done
    cache_path = Path(nb_config.execution_cache_path)
    files = [p for p in toc_files(root, config) if cmix_nbdeps.is_executed_notebook(p)]
    keys = cmix_nbdeps.current_keys(
        root, files, config.get("cmix_nbdeps_package", ""),
        config.get("cmix_nbdeps_data", cmix_nbdeps.DEFAULT_DATA),
        config.get("cmix_nbdeps_extra_packages", cmix_nbdeps.DEFAULT_EXTRA_PACKAGES))
    stored = cmix_nbdeps.read_keys(cache_path)
    for path, key in keys.items():          # what cmix_nbdeps.mark_outdated does, beforehand
        if stored.get(path) != key:
            cmix_nbdeps.remove_cache_record(cache_path, Path(path))
            stored[path] = key
    cmix_nbdeps.write_keys(cache_path, stored)
    jc = get_cache(str(cache_path))
    todo = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        if any(PurePosixPath(path.as_posix()).match(p)
               for p in nb_config.execution_excludepatterns):
            continue                        # myst-nb does not execute it either
        notebook, read_fmt, config_nb = read_notebook(path, md_config, nb_config)
        try:
            jc.match_cache_notebook(notebook)
            done["cached"].append(rel)
            continue
        except KeyError:
            pass
        record = (jc.add_nb_to_project(str(path), read_data=read_fmt) if read_fmt is not None
                  else jc.add_nb_to_project(str(path)))
        NbProjectRecord.remove_tracebacks([record.pk], jc.db)
        cwd = None if config_nb.execution_in_temp else str(path.parent)
        todo.append((rel, record.uri, notebook, cwd, config_nb))
    log(f"run_notebooks: {len(todo)} to execute with {jobs} process(es), "
        f"{len(done['cached'])} current in {cache_path}")
    threads = max(1, (os.cpu_count() or 1) // jobs) if jobs > 1 else None
    start = time.perf_counter()
    with ProcessPoolExecutor(max(1, jobs), mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_execute, nbformat.writes(notebook), cwd,
                               config_nb.execution_timeout, config_nb.execution_allow_errors,
                               threads): (rel, uri)
                   for rel, uri, notebook, cwd, config_nb in todo}
        for future in as_completed(futures):
            (rel, uri), (text, seconds, error) = futures[future], future.result()
            if error is not None:
                log(f"run_notebooks: {rel} FAILED after {seconds:.1f} s:\n{error}")
                done["failed"].append(rel)
                continue
            jc.cache_notebook_bundle(CacheBundleIn(nbformat.reads(text, as_version=4), uri,
                                                   data={"execution_seconds": seconds}),
                                     check_validity=False, overwrite=True)
            log(f"run_notebooks: {rel} executed in {seconds:.1f} s")
            done["executed"].append(rel)
    log(f"run_notebooks: {len(done['executed'])} executed in "
        f"{time.perf_counter() - start:.1f} s, {len(done['failed'])} failed")
    return done


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=".", help="the book's folder (_config.yml)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    done = run_notebooks(Path(args.root), args.jobs)
    if done["failed"]:
        print("run_notebooks: failed (see the tracebacks above): " + ", ".join(done["failed"]),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
