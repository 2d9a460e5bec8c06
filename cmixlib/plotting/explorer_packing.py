r"""How the static explorer stores its numbers: maps and signed score rows as integers.

Shared by :mod:`cmixlib.plotting.explorer` (the page) and
:mod:`cmixlib.plotting.explorer_models` (one model's block). A map value :math:`v \in [0, 1]`
(maps are row-normalised) is stored as :math:`\mathrm{round}(10^d v)` with :math:`d` =
:data:`DECIMALS`; NaN (a row not computed) as -1. A signed score row :math:`s` is stored as
:math:`\mathrm{round}(10^d\, s_j / \max_k |s_k|)` with its scale :math:`\max_k |s_k|`.
"""
from __future__ import annotations

import numpy as np

__all__ = ["DECIMALS", "pack_maps", "pack_row"]

#: Rounding of the values stored in the page (maps are row-normalised: values in [0, 1]).
DECIMALS = 3


def pack_maps(maps: dict[str, np.ndarray], decimals: int = DECIMALS) -> dict[str, list]:
    """Arrays ``{name: array}`` as JSON-ready nested lists of integers: value x 10^decimals
    rounded; NaN (rows not computed) becomes -1 (values must be >= 0 elsewhere; signed rows are
    packed by :func:`pack_row`)."""
    scale = 10 ** decimals
    out = {}
    for name, m in maps.items():
        a = np.asarray(m, dtype=np.float64)
        if np.any(a[np.isfinite(a)] < -0.5 / scale):
            raise ValueError(f"pack_maps: {name} has negative values; -1 marks NaN here.")
        q = np.where(np.isfinite(a), np.rint(a * scale), -1).astype(np.int64)
        out[name] = q.tolist()
    return out


def pack_row(row: np.ndarray, decimals: int) -> tuple[list[int], float]:
    r"""A signed score row as integers :math:`\mathrm{round}(10^d\, s_j / \max_k |s_k|)` and the
    scale :math:`\max_k |s_k|` (1.0 for an all-zero row)."""
    r = np.asarray(row, dtype=np.float64)
    if not np.all(np.isfinite(r)):
        raise ValueError("pack_row: the scores must be finite.")
    scale = float(np.abs(r).max()) or 1.0
    return np.rint(r / scale * 10 ** decimals).astype(np.int64).tolist(), scale
