"""Sentences and verdicts generated from computed values, each by a stated rule.

The book never types a result into its prose: a sentence that states a number, an order of
methods or an agreement with a paper is produced here from the run's values. Each function's
docstring states its rule, and the chapters name the function next to the sentence.

* :func:`describe_claims` -- how many of a paper's qualitative claims hold on our run;
* :func:`describe_ranking` -- our order of methods against the paper's;
* :func:`describe_depth_trend` -- whether a per-layer quantity rises with depth;
* :func:`describe_model_difference` -- the run's model against the paper's (shape);
* :func:`ranking_verdict` -- the verdict of a table of numbers: reproduced / same ranking /
  same direction / too few methods / differs, with an exact permutation p-value;
* :func:`claims_verdict` -- the verdict of a figure from its qualitative claims and its
  headline claim;
* :func:`holds_every_layer` -- a per-layer claim ("in every layer") tested at every layer;
* :func:`permutation_p` -- the one-sided permutation p-value of Spearman's rho;
* :func:`with_model_condition` -- a verdict marked "(other model)" when the run's model is not
  the paper's.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import permutations
from typing import Any

import numpy as np
import pandas as pd

from cmixlib.data.paper_numbers import PAPER_MODEL_SHAPES
from cmixlib.metrics.statistics import spearman
from cmixlib.models.loading import DEFAULT_MODEL

__all__ = ["describe_claims", "describe_model_difference", "describe_depth_trend",
           "describe_ranking", "claims_verdict", "ranking_verdict",
           "holds_every_layer", "permutation_p", "with_model_condition",
           "SANITY_BASELINES", "below_sanity_baselines", "describe_sanity_baselines",
           "VERDICTS", "OTHER_MODEL", "NO_CLAIM", "RANKING_AGREEMENT", "DIRECTION_AGREEMENT", "ALPHA",
           "TOLERANCE", "TIE_TOLERANCE", "EXACT_UP_TO", "MONTE_CARLO_PERMUTATIONS"]

#: The verdict of an item that holds no result a rule could test (a diagram, or example maps with
#: no claim in the caption or the text): nothing to reproduce; the detail says what it shows.
NO_CLAIM = "no claim to test"
#: The mark of a verdict on another model than the paper's (:func:`with_model_condition`).
OTHER_MODEL = " (other model)"
_BASE = ("reproduced", "same ranking", "same direction", "too few methods", "differs")
_CLAIM_WORDS = ("claims hold", "headline holds", "most claims hold", "not decided", "reversed")
#: The verdict vocabulary of the reproduction status: the ranking words (tables of numbers) best
#: first, then the claim words (:func:`claims_verdict`, :mod:`cmixlib.book.claims.rules`); every
#: assessed verdict but "reproduced" has an "(other model)" form (the run's model is not the
#: paper's).
VERDICTS = tuple(w for b in _BASE + _CLAIM_WORDS
                 for w in ((b,) if b == "reproduced" else (b, b + OTHER_MODEL))) + ("not run",)
#: "same ranking": Spearman of our values with the paper's over the methods at least this (and
#: significant, :data:`ALPHA`, and the same best method).
RANKING_AGREEMENT = 0.8
#: "same direction": Spearman above this (and significant at :data:`ALPHA`).
DIRECTION_AGREEMENT = 0.0
#: The one-sided permutation p-value a ranking verdict better than "differs" needs.
ALPHA = 0.05
#: "reproduced": every value within this of the paper's (only when the model is the paper's).
TOLERANCE = 0.05
#: Two methods tie for best when their values are within this (half a unit of the papers'
#: second printed decimal).
TIE_TOLERANCE = 0.005
#: Exact permutation p-values up to this many methods (8! = 40,320 orders); above, Monte-Carlo.
EXACT_UP_TO = 8
#: Monte-Carlo permutations (seed 0) for more than :data:`EXACT_UP_TO` methods.
MONTE_CARLO_PERMUTATIONS = 20_000
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


def claims_verdict(claims: pd.Series, headline: str | None = None) -> tuple[str, str]:
    """Verdict of a figure from its boolean claims (index = the claims' text). A figure ranks
    nothing, so the words are those of :data:`cmixlib.book.claims.rules.CLAIM_VERDICTS`, never a
    ranking word.

    Rule with a ``headline`` (one claim's text, the paper's main claim about the figure):

    * the headline fails -> "differs", whatever the other claims;
    * every claim holds -> "claims hold";
    * the headline holds and at least half of the other claims hold -> "headline holds";
    * else "differs".

    Without a headline (fallback, for a table of claims none of which is the main one): all
    hold -> "claims hold"; at least half -> "most claims hold"; else "differs".
    Detail: "k of m claims hold", the headline and whether it holds, and the failed claims."""
    ok = claims.astype(bool)
    k, m = int(ok.sum()), len(ok)
    detail = _claims_held(claims, "claims")
    if headline is None:
        if k == m:
            return "claims hold", detail
        return ("most claims hold" if 2 * k >= m else "differs"), detail
    if headline not in ok.index:
        raise KeyError(f"the headline {headline!r} is not one of the claims")
    held = bool(ok[headline])
    detail = f"headline {'holds' if held else 'fails'}: {headline}; {detail}"
    others = ok.drop(headline)
    if not held:
        return "differs", detail
    if k == m:
        return "claims hold", detail
    return ("headline holds" if 2 * int(others.sum()) >= len(others) else "differs"), detail


def holds_every_layer(values_by_layer: pd.DataFrame | pd.Series,
                      predicate: Callable[[Any], Any]) -> bool:
    """Whether a claim "in every layer" holds: ``predicate`` applied to each layer's values.

    ``values_by_layer``: one row (DataFrame) or value (Series) per layer. ``predicate`` takes one
    layer's row (a Series of method -> value) or value and returns a bool. Rule: True iff the
    predicate holds at every layer (and there is at least one layer) -- never on a mean over
    layers, which one strong layer can carry."""
    rows = (values_by_layer.iterrows() if isinstance(values_by_layer, pd.DataFrame)
            else values_by_layer.items())
    results = [bool(predicate(row)) for _, row in rows]
    return bool(results) and all(results)


def with_model_condition(verdict: str, same_model: bool) -> str:
    """``verdict`` + " (other model)" when the run's model is not the paper's (rule: every
    assessed verdict except "not run"/:data:`NO_CLAIM`; "reproduced" needs the paper's model, so it
    never gets the mark)."""
    if same_model or verdict in ("not run", NO_CLAIM) or verdict.endswith(OTHER_MODEL):
        return verdict
    return verdict + OTHER_MODEL


def describe_model_difference(model: Any, paper_model: str = DEFAULT_MODEL) -> str:
    """A sentence comparing the shape of the model that ran (a :class:`cmixlib.ModelBundle`, or
    a transformers ``config``) with the paper's model
    (:data:`cmixlib.data.paper_numbers.PAPER_MODEL_SHAPES`).

    Rule: "the same shape" iff layers, hidden size and heads are all equal; otherwise both
    shapes are printed, and a model with fewer layers gets "layer axis k/L as long"."""
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


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), centred."""
    r = pd.Series(values).rank(method="average").to_numpy(dtype=float)
    return r - r.mean()


def permutation_p(ours: np.ndarray, paper: np.ndarray, *,
                  seed: int = 0) -> tuple[float, float, str, float]:
    """``(rho, p, how, p_min)``: Spearman's rho of two value lists and its one-sided permutation
    p-value P(rho_perm >= rho_obs) under a random order of our values.

    Rule: with m <= :data:`EXACT_UP_TO` values, all m! orders of our (average) ranks are
    enumerated ("exact"); above, :data:`MONTE_CARLO_PERMUTATIONS` random orders (``seed``) give
    p = (count + 1) / (N + 1) ("Monte-Carlo"). ``p_min``: the smallest p any order of our values
    could reach (exact: the share of orders at the largest rho; 1/6 for m = 3, so no 3-method
    table is ever significant at :data:`ALPHA`). rho is NaN (and p 1) when a list is constant."""
    ro, rp = _ranks(np.asarray(ours, dtype=float)), _ranks(np.asarray(paper, dtype=float))
    m, norm = len(ro), float(np.linalg.norm(ro) * np.linalg.norm(rp))
    if norm == 0:
        return float("nan"), 1.0, "constant values", 1.0
    rho = float(ro @ rp / norm)
    if m <= EXACT_UP_TO:
        perms = np.array(list(permutations(range(m))), dtype=np.intp)
        rhos = ro[perms] @ rp / norm
        p = float(np.mean(rhos >= rho - _EPS))
        return rho, p, "exact", float(np.mean(rhos >= rhos.max() - _EPS))
    rng = np.random.default_rng(seed)
    perm = rng.permuted(np.tile(np.arange(m), (MONTE_CARLO_PERMUTATIONS, 1)), axis=1)
    rhos = ro[perm] @ rp / norm
    n = MONTE_CARLO_PERMUTATIONS
    p = float((np.sum(rhos >= rho - _EPS) + 1) / (n + 1))
    return rho, p, f"Monte-Carlo, {n:,} permutations", 1.0 / (n + 1)


def _best(values: pd.Series, higher_is_better: bool) -> list[str]:
    """The methods tied for best: within :data:`TIE_TOLERANCE` of the best value (in the
    frame's order, never chosen by name)."""
    best = values.max() if higher_is_better else values.min()
    return [str(k) for k, v in values.items() if abs(v - best) <= TIE_TOLERANCE + _EPS]


def _show_best(methods: list[str]) -> str:
    return methods[0] if len(methods) == 1 else " = ".join(methods) + " (tie)"


#: The sanity baselines of the faithfulness and correlation tables (registry kind "control").
SANITY_BASELINES = ("random", "nearness")


def below_sanity_baselines(values: Mapping[str, float],
                           baselines: tuple[str, ...] = SANITY_BASELINES) -> list[str]:
    """The methods of a table that do not beat its sanity baselines. Rule: a method (any key
    that is not a baseline) is flagged when its value is not above every baseline present in
    ``values`` (ties flagged: equal to a floor is not above it); with no baseline present,
    nothing is flagged. Keys keep the table's order."""
    v = {k: float(x) for k, x in values.items() if x is not None and np.isfinite(float(x))}
    floor = [v[b] for b in baselines if b in v]
    if not floor:
        return []
    top = max(floor)
    return [k for k, x in v.items() if k not in baselines and not x > top]


def describe_sanity_baselines(values: Mapping[str, float], *, label: Any = str,
                              baselines: tuple[str, ...] = SANITY_BASELINES) -> str:
    """A sentence on a table's sanity baselines: their values and the methods that are not
    above them (:func:`below_sanity_baselines`: not above every baseline present; ties
    flagged). E.g. "Sanity baselines: Random +0.01, Nearness +0.25; not above them: A, B." or
    "...; every method is above them."; "" when no baseline is in the table."""
    v = {k: float(x) for k, x in values.items() if x is not None and np.isfinite(float(x))}
    present = [b for b in baselines if b in v]
    if not present:
        return ""
    flagged = below_sanity_baselines(v, baselines)
    head = "Sanity baselines: " + ", ".join(f"{label(b)} {v[b]:+.2f}" for b in present)
    return head + ("; not above them: " + ", ".join(label(m) for m in flagged) + "."
                   if flagged else "; every method is above them.")


def ranking_verdict(ours: Mapping[str, float], paper: Mapping[str, float], *,
                    same_model: bool, higher_is_better: bool = True) -> tuple[str, str]:
    """``(verdict, detail)`` for a table of per-method numbers, ours against the paper's.

    Rule, over the m methods both have (at least 2, else "not run"); rho = Spearman of the two
    value lists, p = its one-sided permutation p-value (:func:`permutation_p`: exact for m <= 8):

    * "reproduced": the model is the paper's and every value is within :data:`TOLERANCE`;
    * "too few methods": no order of our values could reach p <= :data:`ALPHA` (m <= 3): the
      ranking is not tested, whatever rho is, and the detail prints no rho;
    * "same ranking": rho >= :data:`RANKING_AGREEMENT`, p <= :data:`ALPHA`, and the same best
      method: the methods within :data:`TIE_TOLERANCE` of the best (ours, the paper's) share
      at least one method;
    * "same direction": rho > 0 and p <= :data:`ALPHA`;
    * "differs": otherwise (including a constant list, where rho is undefined).

    A run on another model cannot be "reproduced", and its verdict carries "(other model)"
    (:func:`with_model_condition`). Detail, e.g. ``Spearman +0.93 (p = 0.003, exact, 7 methods);
    best: ours A = B (tie), paper A; largest |difference| 0.05``."""
    o = pd.Series(ours, dtype=float).dropna()
    p = pd.Series(paper, dtype=float).dropna()
    shared = [m for m in p.index if m in o.index]
    if len(shared) < 2:
        return "not run", "fewer than two methods with both values"
    o, p = o[shared], p[shared]
    rho, pval, how, p_min = permutation_p(o.to_numpy(), p.to_numpy())
    best_o, best_p = _best(o, higher_is_better), _best(p, higher_is_better)
    gap = float(np.max(np.abs(o.to_numpy() - p.to_numpy())))
    detail = (f"Spearman {rho:+.2f} (p = {pval:.3g}, {how}, {len(shared)} methods); best: ours "
              f"{_show_best(best_o)}, paper {_show_best(best_p)}; largest |difference| {gap:.2f}")
    if same_model and gap <= TOLERANCE:
        return "reproduced", detail
    significant = pval <= ALPHA + _EPS
    if np.isnan(rho):
        verdict = "differs"
    elif p_min > ALPHA + _EPS:
        verdict = "too few methods"
        detail = (f"ranking not tested: no order of {len(shared)} methods reaches p <= "
                  f"{ALPHA:g}; best: ours {_show_best(best_o)}, paper {_show_best(best_p)}; "
                  f"largest |difference| {gap:.2f}")
    elif rho >= RANKING_AGREEMENT - _EPS and significant and set(best_o) & set(best_p):
        verdict = "same ranking"
    elif rho > DIRECTION_AGREEMENT + _EPS and significant:
        verdict = "same direction"
    else:
        verdict = "differs"
    return with_model_condition(verdict, same_model), detail
