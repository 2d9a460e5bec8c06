"""Paired differences between methods scored on the same examples: their standard error is the
spread of the per-example differences, which combining the two methods' own spreads as if they
were independent overstates when the methods' scores correlate (they usually do: the same
sentence is easy or hard for every method)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from cmixlib.metrics.evaluation import ALIGNMENT_METRICS

__all__ = ["paired_alignment"]


def paired_alignment(rows: Iterable[Mapping] | pd.DataFrame,
                     metrics: Sequence[str] = ALIGNMENT_METRICS) -> pd.DataFrame:
    r"""Paired differences between methods, per layer and metric: for each pair ``a`` < ``b``
    (method names in sorted order), over the examples where both are finite,
    :math:`d_e = s_{a,e} - s_{b,e}`, its mean, std (ddof=0) and count. The standard error of a
    difference of two methods scored on the same examples is then std / sqrt(n), which an
    unpaired combination of the two methods' spreads overstates when they correlate. One row
    per (layer, metric, a, b); columns layer, metric, a, b, mean, std, n."""
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    methods = sorted(df["method"].unique())
    out = []
    for metric in [m for m in metrics if m in df.columns]:
        wide = df.pivot_table(index=["layer", "example"], columns="method", values=metric,
                              aggfunc="first", dropna=False).reindex(columns=methods)
        for layer, block in wide.groupby(level="layer", sort=True):
            x = block.to_numpy(dtype=float)                          # (examples, methods)
            for i, a in enumerate(methods):
                d = x[:, [i]] - x[:, i + 1:]                          # (examples, later ones)
                ok = np.isfinite(d)
                n = ok.sum(axis=0)
                dz = np.where(ok, d, 0.0)
                mean = dz.sum(axis=0) / np.maximum(n, 1)
                var = (np.where(ok, d - mean, 0.0) ** 2).sum(axis=0) / np.maximum(n, 1)
                for k, b in enumerate(methods[i + 1:]):
                    out.append({"layer": layer, "metric": metric, "a": a, "b": b,
                                "mean": float(mean[k]) if n[k] else float("nan"),
                                "std": float(np.sqrt(var[k])) if n[k] else float("nan"),
                                "n": int(n[k])})
    return pd.DataFrame(out, columns=["layer", "metric", "a", "b", "mean", "std", "n"])
