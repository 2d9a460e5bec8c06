"""ALTI's Figures 8-10 (Ferrando et al. 2022, Appendix C): the relevance matrices R^l of attention
rollout, norm rollout and ALTI across layers, and the claim the main text draws from them
(section 5): rollout "converges on bigger models giving homogeneous relevance matrices (Figure 8
in Appendix C), assigning extremely high scores to [CLS] and [SEP] tokens", where ALTI does not.

The figures show one sentence; the claim is about the method, so the run measures it on the
same SST-2 test sentences as Table 2 with two numbers per map R (rows i receiving, columns j
contributing, each row normalised to sum 1):

* homogeneity  h(R) = 1 - (1/n^2) sum_{i,k} TV(R_i, R_k),  TV(p, q) = (1/2) sum_j abs(p_j - q_j)
  (1: every row the same distribution; 1/n for the identity; lower: rows differ);
* special mass  s(R) = (1/n) sum_i (R_{i,[CLS]} + R_{i,[SEP]}).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from cmixlib.methods.aggregation import normalize_rows, rollout, row_spread
from cmixlib.experiments.common import batched, pad_id, padded_batch
from cmixlib.experiments.declaration import Experiment
from cmixlib.experiments.runner import Context
from cmixlib.experiments.sources import CLASSIFIER_SETTINGS, SST2_CLASSIFIER, Data, Inputs
from cmixlib.methods import dispatch as core

__all__ = ["FIGS8_10", "FIGS8_10_METHODS", "homogeneity", "special_mass",
           "relevance_maps"]

#: The three figures' methods, in their order: Figure 8 attention rollout, Figure 9 norm rollout
#: (the row-normalised rollout of N-ResLN, as Table 2), Figure 10 ALTI.
FIGS8_10_METHODS = ("attention_rollout", "rollout:attn_norm_res_ln", "alti")
#: The claim the main text rests on Figure 8 (against Figure 10).


def homogeneity(maps: np.ndarray) -> np.ndarray:
    r"""Homogeneity of the rows of each map, ``(..., n, n) -> (...)``: one minus the mean
    total-variation distance between its rows (:func:`cmixlib.methods.aggregation.row_spread`), after
    normalising each row to sum 1,

    .. math:: h(R) = 1 - \frac{1}{n^2}\sum_{i,k} \tfrac12 \sum_j \big|\hat R_{ij} -
       \hat R_{kj}\big|, \qquad \hat R_i = R_i / \textstyle\sum_j R_{ij}.

    1 when every row is the same distribution, :math:`1/n` for the identity. Rows must have a
    positive sum."""
    r = np.asarray(maps, dtype=float)
    sums = r.sum(axis=-1, keepdims=True)
    if not np.all(sums > 0):
        raise ValueError("homogeneity needs rows with a positive sum (non-negative relevance).")
    return 1.0 - np.asarray(row_spread(r / sums))


def special_mass(maps: np.ndarray) -> np.ndarray:
    r"""Mean share of each row on the first and last token ([CLS] and [SEP]), ``(..., n, n) ->
    (...)``: :math:`s(R) = \frac1n \sum_i (\hat R_{i,1} + \hat R_{i,n})`, rows normalised."""
    r = normalize_rows(np.asarray(maps, dtype=float))
    return (r[..., 0] + r[..., -1]).mean(axis=-1)


def relevance_maps(bundle, batch: list[dict]) -> list[dict[str, np.ndarray]]:
    """``{method: (L, n, n)}`` of :data:`FIGS8_10_METHODS` for each sentence of a batch (one padded
    forward; norm rollout = row-normalised rollout of N-ResLN without identity, as Table 2)."""
    ids, mask = padded_batch(batch, pad_id(bundle.tokenizer))
    maps = core.context_mixing(bundle.model, bundle.tokenizer,
                               {"input_ids": ids, "attention_mask": mask},
                               methods=["attention_rollout", "attn_norm_res_ln", "alti"])
    maps = maps if isinstance(maps, list) else [maps]
    out = []
    for m in maps:
        # rollout(normalize=True) multiplies row-normalised maps: its rows already sum to 1
        norm = rollout(m["attn_norm_res_ln"], add_identity=False, normalize=True)
        out.append({"attention_rollout": m["attention_rollout"],
                    "rollout:attn_norm_res_ln": norm, "alti": m["alti"]})
    return out


def figs8_10(ctx: Context) -> dict[str, pd.DataFrame]:
    """For each SST-2 test sentence (the first ``limit``, as Table 2; the SST-2 classifier), the
    relevance matrices R^l (every row, l = 1..L) of attention rollout, norm rollout and ALTI;
    per layer and method the mean over sentences of :func:`homogeneity` and :func:`special_mass`.
    Frame ``result``: method, layer, homogeneity, special_mass, n; frame ``per_sentence``: the
    per-sentence values."""
    bundle, _, examples = ctx.load_inputs()

    def rows(batch):
        return [{m: (homogeneity(r), special_mass(r)) for m, r in maps.items()}
                for maps in relevance_maps(bundle, batch)]

    per = batched(ctx, examples, rows, desc="ALTI Figures 8-10")
    recs = []
    for k in range(len(examples)):
        for m, (h, s) in per[k].items():
            recs += [{"example": k, "method": m, "layer": layer + 1, "homogeneity": float(h[layer]),
                      "special_mass": float(s[layer])} for layer in range(len(h))]
    per_sentence = pd.DataFrame(recs)
    result = (per_sentence.groupby(["method", "layer"], sort=False)
              .agg(homogeneity=("homogeneity", "mean"), special_mass=("special_mass", "mean"),
                   n=("example", "size")).reset_index())
    return {"result": result, "per_sentence": per_sentence}


def _summary(frames) -> str:
    t = frames["result"].pivot_table(index="layer", columns="method",
                                     values=["homogeneity", "special_mass"])
    return "mean over sentences per layer:\n" + t.to_string(float_format=lambda v: f"{v:.3f}")


FIGS8_10 = Experiment(
    name="alti-figs8-10-homogeneity",
    title="Homogeneity of rollout, norm-rollout and ALTI relevance matrices per layer (SST-2)",
    paper="ALTI (Figures 8-10)", compute=figs8_10,
    inputs=Inputs(SST2_CLASSIFIER, Data("sst2_test")),
    defaults={**CLASSIFIER_SETTINGS}, summary=_summary)
