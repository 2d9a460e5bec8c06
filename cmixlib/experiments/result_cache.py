"""Where a run's result is cached and what identifies it: the results folder
(:func:`results_root`), the code version of an experiment (:func:`code_version`: the source of
the modules it imports, less the presentation modules) and the cache key (:func:`cache_key`);
reading a cached result back (:func:`load_cached`).

**Cache.** ``<root>/results/<experiment>/<key>/`` where ``<root>`` is ``$CMIX_CACHE`` or
``<repo>/.cmix_cache``. ``key`` hashes (experiment, model name, limit, settings, code version);
the code version hashes the source of every module of cmixlib the experiment imports (and the
committed weights' manifests), so a change to that code, a different model or any changed
setting recomputes, and an edit elsewhere does not.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Mapping

import pandas as pd

from cmixlib.cache import PACKAGE_DIR, cache_root, code_text, result_closure, source_files, stable_hash
from cmixlib.experiments.declaration import REGISTRY

__all__ = ["results_root", "PRESENTATION_MODULES", "presentation_files", "code_files",
           "code_version", "cache_key", "load_cached"]


def results_root() -> Path:
    """``<cache root>/results`` (see :func:`cmixlib.cache.cache_root`)."""
    return cache_root() / "results"


#: Modules (or sub-packages) of cmixlib that only present or check results: notebook setup, the
#: command line, coursework checkers, plots. No other module imports them (a test checks this), so
#: they cannot change a result, and :func:`code_version` leaves them out: editing a plot does not
#: recompute the book.
PRESENTATION_MODULES = frozenset({"book", "plotting", "cli"})


def presentation_files() -> frozenset[str]:
    """The ``.py`` files of :data:`PRESENTATION_MODULES` (all files of a sub-package), as paths
    relative to the package (as :func:`cmixlib.cache.source_files` takes them)."""
    return frozenset(f.relative_to(PACKAGE_DIR).as_posix()
                     for f in source_files(*sorted(PRESENTATION_MODULES), missing_ok=True))


def code_files(experiment: str | None = None) -> list[Path]:
    """The ``.py`` files of cmixlib a result of ``experiment`` depends on: those its module
    imports, transitively (:func:`cmixlib.cache.result_closure`; an experiment declared outside
    cmixlib, e.g. in a notebook, and ``None``: every file), less :data:`PRESENTATION_MODULES`."""
    exp = REGISTRY.get(experiment) if experiment is not None else None
    module = getattr(exp.compute, "__module__", "") if exp is not None else ""
    if module.startswith(f"{PACKAGE_DIR.name}."):
        files = result_closure([module])
    else:
        files = source_files()
    skip = presentation_files()
    return [f for f in files if f.relative_to(PACKAGE_DIR).as_posix() not in skip]


def code_version(experiment: str | None = None) -> str:
    """Hash (12 hex) of the code of :func:`code_files` (docstrings and comments left out,
    :func:`cmixlib.cache.code_text`) and of the committed weights' manifests (they hold the
    weights' checksums: ``cmixlib/assets/*/manifest.json``, ``assets/classifiers/*/``): editing a
    module re-runs only the experiments that import it."""
    h = hashlib.sha256()
    for f in sorted(code_files(experiment)):
        h.update(f.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + code_text(f).encode() + b"\0")
    for manifest in sorted((PACKAGE_DIR / "assets").rglob("manifest.json")):
        h.update(manifest.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + manifest.read_bytes())
    return h.hexdigest()[:12]


def cache_key(experiment: str, model: str, limit: int | None, settings: Mapping, version: str) -> str:
    """The result folder's name: :func:`cmixlib.cache.stable_hash` of what produced the result."""
    return stable_hash({"experiment": experiment, "model": model, "limit": limit,
                        "settings": settings, "code_version": version})


def load_cached(directory: Path) -> tuple[dict[str, pd.DataFrame], dict, pd.DataFrame | None] | None:
    """``(frames, meta, paper)`` of the result written in ``directory`` (``meta.json``, one CSV per
    frame, ``paper.csv`` if any); None when there is none or it cannot be read."""
    meta_path = directory / "meta.json"
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        frames = {name: pd.read_csv(directory / f"{name}.csv") for name in meta["frames"]}
        paper = pd.read_csv(directory / "paper.csv") if (directory / "paper.csv").exists() else None
    except (OSError, ValueError, KeyError):
        return None
    return frames, meta, paper
