"""The on-disk cache shared by data annotation, trained models and experiment results.

Everything cached is keyed by :func:`stable_hash` of what produced it (inputs, settings, code
version), so a stale entry is never reused: a changed input simply gets a new key.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

CACHE_ENV_VAR = "CMIX_CACHE"


def cache_root() -> Path:
    """Cache folder, created on demand: ``$CMIX_CACHE`` if set; else ``.cmix_cache/`` at the
    repository root when cmixlib runs from a writable clone (git-ignored); else ``~/.cache/cmixlib``."""
    env = os.environ.get(CACHE_ENV_VAR, "").strip()
    if env:
        path = Path(env).expanduser()
    else:
        root = Path(__file__).resolve().parents[1]
        if (root / "pyproject.toml").is_file() and os.access(root, os.W_OK):
            path = root / ".cmix_cache"
        else:
            path = Path.home() / ".cache" / "cmixlib"
    path.mkdir(parents=True, exist_ok=True)
    return path


def jsonable(obj: Any) -> Any:
    """A JSON-serialisable, canonical (key- and set-sorted) copy of ``obj``."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple, set)):
        return [jsonable(v) for v in (sorted(obj) if isinstance(obj, set) else obj)]
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # torch tensor
        return obj.detach().cpu().tolist()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)


def stable_hash(obj: Any, length: int = 16) -> str:
    """SHA-256 (hex, truncated) of a canonical JSON dump of ``obj``."""
    text = json.dumps(jsonable(obj), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]
