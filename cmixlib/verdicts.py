"""Sentences and verdicts generated from computed values, each by a stated rule.

The book never types a result into its prose: a sentence that states a number, an order of
methods or an agreement with a paper is produced here from the run's values. Each function's
docstring states its rule, and the chapters name the function next to the sentence.

* :func:`describe_claims` -- how many of a paper's qualitative claims hold on our run;
* :func:`describe_ranking` -- our order of methods against the paper's;
* :func:`describe_depth_trend` -- whether a per-layer quantity rises with depth;
* :func:`describe_model_difference` -- the run's model against the paper's (shape);
* :func:`alignment_claims` -- Value Zeroing's claims about its Figures 1-2, tested on a
  layer x method table (chapter 9 and the reproduction status);
* :func:`ranking_verdict` -- the verdict of a table of numbers: reproduced / same ranking /
  same direction / differs;
* :func:`claims_verdict` -- the verdict of a figure from its qualitative claims.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from .evaluation import spearman
from .models import DEFAULT_MODEL

__all__ = ["describe_claims", "describe_model_difference", "describe_depth_trend",
           "describe_ranking", "alignment_claims", "claims_verdict", "ranking_verdict", "VERDICTS",
           "RANKING_AGREEMENT", "DIRECTION_AGREEMENT", "TOLERANCE"]

#: The verdict vocabulary of the reproduction status, best first.
VERDICTS = ("reproduced", "same ranking", "same direction", "differs", "not run")
#: "same ranking": Spearman of our values with the paper's over the methods at least this.
RANKING_AGREEMENT = 0.8
#: "same direction": Spearman of our values with the paper's over the methods at least this (a
#: moderate agreement: with 4 to 8 methods, a smaller positive rho is what a random order gives
#: often: a random order reaches rho >= 0.4 with chance 0.375 for 4 methods, 0.16 for 8).
DIRECTION_AGREEMENT = 0.4
#: "reproduced": every value within this of the paper's (only when the model is the paper's).
TOLERANCE = 0.05
_EPS = 1e-9


def describe_claims(table: pd.DataFrame, who: str = "the paper's claims") -> str:
    """Sentences stating, per column of a claims table, how many claims hold and which fail.

    ``table``: one row per claim (index = the claim's text), one boolean column per condition.
    Rule: a claim "holds" iff its cell is True; the sentence counts them and names the others.
    E.g. "pre-trained: 4 of 6 of the paper's claims hold; not: A; B."
    """
    return " ".join(f"{column}: {_claims_held(table[column], f'of {who}')}."
                    for column in table.columns)


def _claims_held(claims: pd.Series, noun: str) -> str:
    """"k of m <noun> hold; not: A; B" for a boolean Series indexed by the claims' text."""
    ok = claims.astype(bool)
    failed = [str(c) for c in claims.index[~ok]]
    return f"{int(ok.sum())} of {len(ok)} {noun} hold" + ("; not: " + "; ".join(failed)
                                                            if failed else "")


def claims_verdict(claims: pd.Series) -> tuple[str, str]:
    """Verdict of a figure from its boolean claims: all hold -> "same ranking"; at least half ->
    "same direction"; else "differs". Detail: "k of m claims hold" and the failed ones."""
    k, m = int(claims.astype(bool).sum()), len(claims)
    detail = _claims_held(claims, "claims")
    if k == m:
        return "same ranking", detail
    return ("same direction" if 2 * k >= m else "differs"), detail


def describe_model_difference(model: Any, paper_model: str = DEFAULT_MODEL) -> str:
    """A sentence comparing the shape of the model that ran (a :class:`cmixlib.ModelBundle`, or
    a transformers ``config``) with the paper's model
    (:data:`cmixlib.paper_numbers.PAPER_MODEL_SHAPES`).

    Rule: "the same shape" iff layers, hidden size and heads are all equal; otherwise both
    shapes are printed, and a model with fewer layers gets "layer axis k/L as long"."""
    from .paper_numbers import PAPER_MODEL_SHAPES

    if hasattr(model, "model"):                      # a ModelBundle
        name, config = getattr(model, "name", None), model.model.config
    else:
        name, config = None, model
    name = name or getattr(config, "_name_or_path", "") or getattr(config, "model_type", "?")
    paper = PAPER_MODEL_SHAPES[paper_model]
    ours = {"layers": int(config.num_hidden_layers), "hidden": int(config.hidden_size),
            "heads": int(config.num_attention_heads)}
    shape = "{layers} layers, hidden size {hidden}, {heads} heads"
    if ours == paper:
        return f"This run's model ({name}) has the same shape as the paper's {paper_model}: " \
               + shape.format(**paper) + "."
    text = (f"This run's model ({name}) has {shape.format(**ours)}; the paper's {paper_model} has "
            f"{shape.format(**paper)}.")
    if ours["layers"] != paper["layers"]:
        text += (f" Its layer axis is {ours['layers']}/{paper['layers']} as long, so compare "
                 "depth profiles by relative depth, not by layer number.")
    return text


def describe_depth_trend(values: Mapping[int, float], what: str) -> str:
    """A sentence on how ``values`` (layer -> value) change with depth.

    Rule: Spearman's rho between layer index and value; "rises with depth" iff rho >= 0.5, "falls
    with depth" iff rho <= -0.5, else "has no clear trend with depth"; the layer of the maximum is
    named."""
    s = pd.Series(values, dtype=float).sort_index()
    rho = spearman(np.asarray(s.index, dtype=float), s.to_numpy())
    trend = ("rises with depth" if rho >= 0.5 else "falls with depth" if rho <= -0.5
             else "has no clear trend with depth")
    return (f"{what} {trend} (Spearman with the layer index {rho:+.2f}; highest at layer "
            f"{s.idxmax()}: {s.max():.3g}).")


def describe_ranking(ours: Mapping[str, float], paper: Mapping[str, float], *,
                     label: Any = str, top: int = 3, higher_is_better: bool = True) -> str:
    """A sentence comparing our order of methods with the paper's.

    ``ours`` and ``paper`` map method -> value; only methods in both count. Rule: methods are
    ranked by value (best first); the sentence gives both top-``top`` orders, the rank our run
    gives the paper's best method, and the Spearman correlation of the two value lists ("the
    same order" iff it is 1)."""
    o = pd.Series(ours, dtype=float).dropna()
    p = pd.Series(paper, dtype=float).dropna()
    shared = [m for m in p.index if m in o.index]
    if len(shared) < 2:
        return "Fewer than two methods have both a value of ours and of the paper."
    o, p = o[shared], p[shared]
    asc = not higher_is_better
    o_order = list(o.sort_values(ascending=asc).index)
    p_order = list(p.sort_values(ascending=asc).index)
    rho = spearman(o.to_numpy(), p.to_numpy())
    best = p_order[0]
    fmt = lambda order: " > ".join(label(m) for m in order[:top])  # noqa: E731
    agree = "the same order" if np.isclose(rho, 1.0) else f"rank agreement {rho:+.2f}"
    return (f"The paper's top {top}: {fmt(p_order)}; ours: {fmt(o_order)}. The paper's best "
            f"method, {label(best)}, is our number {o_order.index(best) + 1} of {len(shared)}; "
            f"{agree} (Spearman over {len(shared)} methods).")


def alignment_claims(table: pd.DataFrame, gradient_methods: list[str] | None = None,
                     label: Any = str) -> pd.Series:
    """Value Zeroing's claims about its Figures 1-2 (§5), tested on one condition's layer x method
    table of mean dot products (rows: layers in order; columns: method names).

    Rules (means over layers unless stated): Value Zeroing has the highest mean; raw attention is
    below the random baseline; N is above raw attention; N-ResLN is below N; single-layer GlobEnc
    and ALTI are below Value Zeroing; each gradient method is higher in the first third of the
    layers than in the last third. Returns one boolean per claim (index = the claim's text)."""
    mean = table.mean()
    third = max(1, len(table) // 3)
    first, last = table.iloc[:third].mean(), table.iloc[-third:].mean()
    out = {
        "Value Zeroing has the highest mean alignment of all methods":
            mean.idxmax() == "value_zeroing",
        "raw attention is below the random baseline": mean["attention"] < mean["random"],
        "N (attn-norm) is above raw attention": mean["attn_norm"] > mean["attention"],
        "N-ResLN is below N": mean["attn_norm_res_ln"] < mean["attn_norm"],
        "single-layer GlobEnc and ALTI are below Value Zeroing":
            max(mean["globenc_layer"], mean["alti_layer"]) < mean["value_zeroing"],
    }
    for g in [m for m in (gradient_methods or []) if m in table]:
        out[f"{label(g)} is higher in the first third of the layers than in the last"] = \
            bool(first[g] > last[g])
    return pd.Series({k: bool(v) for k, v in out.items()})


def ranking_verdict(ours: Mapping[str, float], paper: Mapping[str, float], *,
                    same_model: bool, higher_is_better: bool = True) -> tuple[str, str]:
    """``(verdict, detail)`` for a table of per-method numbers, ours against the paper's.

    Rule, over the methods both have (at least 2, else "not run"):

    * "reproduced": the model is the paper's and every value is within :data:`TOLERANCE`;
    * "same ranking": Spearman of the two value lists >= :data:`RANKING_AGREEMENT` and the same
      best method;
    * "same direction": Spearman >= :data:`DIRECTION_AGREEMENT`;
    * "differs": otherwise.

    A run on another model can be at best "same ranking": its numbers are not the paper's
    quantity."""
    o = pd.Series(ours, dtype=float).dropna()
    p = pd.Series(paper, dtype=float).dropna()
    shared = [m for m in p.index if m in o.index]
    if len(shared) < 2:
        return "not run", "fewer than two methods with both values"
    o, p = o[shared], p[shared]
    rho = spearman(o.to_numpy(), p.to_numpy())
    best = (o.idxmax(), p.idxmax()) if higher_is_better else (o.idxmin(), p.idxmin())
    gap = float(np.max(np.abs(o.to_numpy() - p.to_numpy())))
    detail = (f"Spearman {rho:+.2f} over {len(shared)} methods; best: ours {best[0]}, paper "
              f"{best[1]}; largest |difference| {gap:.2f}")
    if same_model and gap <= TOLERANCE:
        return "reproduced", detail
    # Spearman over m methods takes the values 1 - 6 k / (m (m^2 - 1)); computed from ranks in
    # floating point a threshold value such as 0.4 (m = 4) can come out as 0.39999..., hence _EPS
    if rho >= RANKING_AGREEMENT - _EPS and best[0] == best[1]:
        return "same ranking", detail
    if rho >= DIRECTION_AGREEMENT - _EPS:
        return "same direction", detail
    return "differs", detail
