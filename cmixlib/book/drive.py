"""Keeping the result cache across Colab runtimes: :func:`save_results` and :func:`load_results`.

A Colab runtime forgets its files when it ends. :func:`save_results` copies the result cache
(:func:`cmixlib.cache.cache_root`: the runs' results and any model trained for them) to Google
Drive (:data:`DRIVE_FOLDER`, mounted if needed) or to a given folder; :func:`load_results` in the
next runtime copies it back. Results are keyed by code version, so a changed book recomputes
instead of reading stale ones.

Example::

    from cmixlib.book.drive import load_results, save_results
    load_results()          # at the start of a Colab runtime
    save_results()          # before it ends
"""
from __future__ import annotations

import shutil
from pathlib import Path

from cmixlib.book.notebook import in_colab
from cmixlib.cache import cache_root

__all__ = ["DRIVE_FOLDER", "save_results", "load_results"]

#: Where :func:`save_results` and :func:`load_results` keep the cache in Colab (Google Drive).
DRIVE_FOLDER = "/content/drive/MyDrive/cmix_cache"


def _drive(folder) -> Path:
    if folder is not None:
        return Path(folder)
    if not in_colab():
        raise ValueError("Give a folder: without one, the cache is kept on Google Drive, which "
                         "is only there in Colab.")
    if not Path(DRIVE_FOLDER).parent.exists():
        # only in Colab (an optional package that exists nowhere else)
        from google.colab import drive  # type: ignore[import-not-found]

        drive.mount(str(Path(DRIVE_FOLDER).parents[1]))
    return Path(DRIVE_FOLDER)


def _copy_new(src: Path, dst: Path) -> int:
    """Copy every file of ``src`` missing in ``dst`` (or of another size) there; the count."""
    copied = 0
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        target = dst / path.relative_to(src)
        if not target.exists() or target.stat().st_size != path.stat().st_size:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied += 1
    return copied


def save_results(folder=None) -> int:
    """Copy the result cache (:func:`cmixlib.cache.cache_root`: runs' results, trained models)
    to ``folder`` (default in Colab: :data:`DRIVE_FOLDER` on Google Drive, mounted if needed),
    adding what is not there yet; returns the number of files copied. A later runtime gets them
    back with :func:`load_results`; results are keyed by code version, so a changed book
    recomputes instead of reading stale ones."""
    n = _copy_new(cache_root(), _drive(folder))
    print(f"save_results: {n} file(s) copied to {_drive(folder)}")
    return n


def load_results(folder=None) -> int:
    """Copy a cache saved by :func:`save_results` from ``folder`` (default in Colab: Google
    Drive) into this runtime's cache, adding what is missing; returns the number of files."""
    src = _drive(folder)
    if not src.is_dir():
        raise FileNotFoundError(f"No saved cache at {src}: run save_results() first.")
    n = _copy_new(src, cache_root())
    print(f"load_results: {n} file(s) copied from {src}")
    return n
