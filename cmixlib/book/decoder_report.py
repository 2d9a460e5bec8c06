"""Chapter 16's sentences, generated from the ``decoder-blimp`` run's frames (and chapter 9's
``vz-cue-alignment`` result), each function with its rule. Presentation only: no experiment
imports this module, so editing a sentence recomputes nothing."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pandas as pd

from cmixlib.book.identity import model_identity, parse_model_text
from cmixlib.book.verdicts import below_sanity_baselines
from cmixlib.methods.registry import method_label
from cmixlib.metrics.statistics import spearman

__all__ = ["SINK_RATIO", "sink_layers", "describe_sink", "describe_decoder_accuracy",
           "mean_over_layers", "describe_alignment_comparison", "describe_decoder_faithfulness",
           "short_name", "describe_logit_parts", "describe_alignment_by_paradigm",
           "pooled_over_paradigms"]

#: A layer input "has a sink" when the BOS token's norm is at least this many times the mean
#: norm of the other tokens (averaged over examples).
SINK_RATIO = 10.0


def _list(names, label: Callable[[str], str] = method_label) -> str:
    names = [label(n) for n in names]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def sink_layers(sink_norm: pd.DataFrame, ratio: float = SINK_RATIO) -> list[int]:
    """Layers (0-based, as in the frame) whose input has ``bos / others >= ratio``."""
    return sink_norm.loc[sink_norm["ratio"] >= ratio, "layer"].astype(int).tolist()


def describe_sink(sink_norm: pd.DataFrame, sink_share: pd.DataFrame, model: str) -> str:
    """The attention sink in words. Rule: the layers (1-based) whose input's BOS norm is at
    least :data:`SINK_RATIO` times the other tokens' mean norm (their count, first and last),
    the largest ratio and its layer; then, per method of ``sink_share``, the mean over layers of
    a row's share on the BOS column, naming the methods with the largest and the smallest;
    last, N's share against attention's (N weighs each weight by the norm of the vector sent, so
    a smaller share for N means the BOS sends shorter vectors than its weight suggests)."""
    layers = sink_layers(sink_norm)
    top = sink_norm.loc[sink_norm["ratio"].idxmax()]
    L = len(sink_norm)
    if layers:
        first = (f"In {model}, the BOS token's residual vector is at least {SINK_RATIO:g} times "
                 f"as long as the other tokens' (mean over the run's sentences) at the input of "
                 f"{len(layers)} of {L} layers (the first is layer {layers[0] + 1}, the "
                 f"last layer {layers[-1] + 1}); ")
    else:
        first = (f"In {model}, the BOS token's residual vector is never {SINK_RATIO:g} times as "
                 f"long as the other tokens' (mean over the run's sentences); ")
    first += (f"the largest ratio is {top['ratio']:.0f} at the input of layer "
              f"{int(top['layer']) + 1}.")
    share = sink_share.groupby("method", sort=False)["share"].mean().sort_values()
    out = (first + f" Averaged over layers, a row puts {share.iloc[-1]:.0%} of its mass on the "
           f"BOS token with {method_label(share.index[-1])} (the most) and "
           f"{share.iloc[0]:.0%} with {method_label(share.index[0])} (the least).")
    if {"attention", "attn_norm"} <= set(share.index):
        a, nrm = share["attention"], share["attn_norm"]
        side = "shorter" if nrm < a else "longer" if nrm > a else "as long"
        out += (f" N gives the BOS {nrm:.0%} of a row against {a:.0%} for attention: the "
                f"weighted vectors the BOS sends are, relative to the other tokens', {side} "
                f"than its attention weights.")
    return out


def describe_decoder_accuracy(acc: pd.DataFrame, model: str) -> str:
    """Rule: the mean over paradigms of ``sentence_accuracy`` (the good sentence has the higher
    log-probability), with the lowest and highest paradigm; then the share of the causal pairs
    (all paradigms pooled) whose target logit beats the foil's at the prediction position."""
    a = acc.set_index("uid")
    s = a["sentence_accuracy"]
    causal = a.dropna(subset=["prediction_accuracy"])
    pooled = float((causal["prediction_accuracy"] * causal["causal_pairs"]).sum()
                   / causal["causal_pairs"].sum()) if len(causal) else float("nan")
    return (f"{model} prefers the good sentence of a pair (higher sum of log-probabilities) "
            f"in {s.mean():.3f} of the pairs on average over the {len(s)} paradigms "
            f"(from {s.min():.3f} in {s.idxmin()} to {s.max():.3f} in {s.idxmax()}), on "
            f"{int(a['pairs'].sum())} pairs; at the prediction position, the target's first "
            f"token beats the foil's in {pooled:.3f} of the {int(causal['causal_pairs'].sum())} "
            f"pairs of the causal evaluation.")


def mean_over_layers(result: pd.DataFrame, metric: str = "dot", **where: str) -> pd.Series:
    """Mean over layers of an alignment frame's ``mean`` column, per method (rows filtered by
    ``where``: column = value)."""
    d = result[result["metric"] == metric]
    for col, value in where.items():
        d = d[d[col] == value]
    return d.groupby("method", sort=False)["mean"].mean()


def pooled_over_paradigms(by_paradigm: pd.DataFrame, uids: Sequence[str]) -> pd.DataFrame:
    """An alignment ``result`` frame (method, layer, metric: mean, n) pooled over the paradigms
    ``uids`` of a ``result_by_paradigm`` frame: mean = sum_u n_u mean_u / sum_u n_u (the mean
    over those paradigms' examples), n = sum_u n_u. Other columns (exclude, condition) keep
    their groups. Raises ValueError for a uid the frame lacks."""
    missing = [u for u in uids if u not in set(by_paradigm["uid"])]
    if missing:
        raise ValueError(f"result_by_paradigm has no rows for {missing}; it has "
                         f"{sorted(set(by_paradigm['uid']))}.")
    d = by_paradigm[by_paradigm["uid"].isin(list(uids))]
    keys = [c for c in d.columns if c not in ("uid", "mean", "std", "n")]
    d = d.assign(weighted=d["mean"] * d["n"])
    g = d.groupby(keys, sort=False)[["weighted", "n"]].sum().reset_index()
    return g.assign(mean=g["weighted"] / g["n"]).drop(columns="weighted")


def describe_alignment_comparison(decoder: Mapping[str, float], encoder: Mapping[str, float],
                                  names: tuple[str, str]) -> str:
    """Mean dot product over layers, decoder beside encoder. Rule: the best method of each
    (ties within 0.005 named together), among the methods both have; the Spearman correlation
    of the two orders (3 or more shared methods); and for Value Zeroing and ALTI-Logit (decoder)
    whether they are above the random baseline of their model (at the printed precision:
    rounded to 3 decimals, so equal printed values are "not above")."""
    dec = pd.Series(decoder, dtype=float).dropna()
    enc = pd.Series(encoder, dtype=float).dropna()
    shared = [m for m in dec.index if m in enc.index and m not in ("random", "nearness")]

    def best(s: pd.Series) -> str:
        s = s[shared]
        return _list(s[s >= s.max() - 0.005].index)

    out = (f"Mean dot product over layers: the best-aligned method is {best(dec)} in "
           f"{names[0]} and {best(enc)} in {names[1]}")
    if len(shared) >= 3:
        out += (f"; the two orders of the {len(shared)} shared methods correlate with Spearman "
                f"{spearman(dec[shared], enc[shared]):+.2f}")
    out += "."
    for m in ("value_zeroing", "alti_logit"):
        if m in dec and "random" in dec:
            side = "above" if round(dec[m], 3) > round(dec["random"], 3) else "not above"
            out += (f" In {names[0]}, {method_label(m)} ({dec[m]:.3f}) is {side} the random "
                    f"baseline ({dec['random']:.3f}).")
    return out


def describe_decoder_faithfulness(means: Mapping[str, float], model: str) -> str:
    """Rule: the method with the highest mean Spearman with blank-out (baselines excluded), and
    the methods that are not above both sanity baselines
    (:func:`cmixlib.book.verdicts.below_sanity_baselines`)."""
    v = pd.Series(means, dtype=float).dropna()
    methods = v.drop([b for b in ("random", "nearness") if b in v.index])
    out = (f"In {model}, the method whose row at the prediction position best follows blank-out "
           f"is {method_label(methods.idxmax())} (mean Spearman {methods.max():+.3f})")
    flagged = below_sanity_baselines(v.to_dict())
    if flagged:
        out += (f"; not above the sanity baselines (random, nearness): "
                f"{_list(flagged)}.")
    else:
        out += "; every method is above both sanity baselines (random, nearness)."
    return out


def describe_alignment_by_paradigm(by_paradigm: pd.DataFrame, drops: pd.DataFrame, model: str,
                                   exclude: str = "bos") -> str:
    """Cue alignment per paradigm in words. Rule: per paradigm (``uid``, in the frame's order),
    the mean dot product over layers of each method (``exclude`` mode), the best method (ties
    within 0.005 named together, the random baseline excluded) and how many methods are above
    the random baseline; then, per paradigm, the pairs left out of the cue alignment with their
    reason (``alignment_drops``, reasons other than "kept")."""
    parts = []
    for uid in dict.fromkeys(by_paradigm["uid"]):
        v = mean_over_layers(by_paradigm, exclude=exclude, uid=uid)
        methods = v.drop("random", errors="ignore")
        best = _list(methods[methods >= methods.max() - 0.005].index)
        above = int((methods > v.get("random", float("-inf"))).sum())
        n = int(by_paradigm[(by_paradigm.uid == uid) & (by_paradigm.metric == "dot")]["n"].max())
        parts.append(f"in {uid} ({n} pair{'' if n == 1 else 's'}) the best-aligned method is "
                     f"{best} "
                     f"({methods.max():.3f}), and {above} of {len(methods)} methods are above "
                     f"the random baseline ({v.get('random', float('nan')):.3f})")
    mode = {"bos": "BOS left out", "none": "BOS kept"}.get(exclude, f"exclude={exclude}")
    out = (f"Mean dot product over layers per paradigm in {model} ({mode}): "
           + "; ".join(parts) + "." if parts else
           f"In {model}, no pair has a cue other than the prediction position.")
    left = drops[drops["reason"] != "kept"]
    for (uid, reason), g in left.groupby(["uid", "reason"], sort=False):
        k = int(g["pairs"].sum())
        out += (f" Left out of the cue alignment ({reason.replace('_', ' ')}): {k} {uid} "
                f"pair{'' if k == 1 else 's'}.")
    return out


def describe_logit_parts(parts: pd.DataFrame, model: str) -> str:
    """ALTI-Logit's remainder in words. Rule, over the rows of ``logit_parts`` (one per example:
    the logit difference, the part the explanation gives to tokens, the remainder left to MLPs
    and biases): the mean of ``|remainder| / (|tokens| + |remainder|)``, its range, and the share
    of examples where the remainder is larger in magnitude than the tokens' part."""
    if not len(parts):
        return f"In {model}, no example was explained."
    share = parts["remainder_share"].astype(float)
    larger = float((parts["remainder"].abs() > parts["tokens"].abs()).mean())
    return (f"In {model}, the logit difference splits into the part ALTI-Logit gives to the "
            f"tokens (attention terms carried to the tokens, plus the embedding term at the "
            f"prediction position) and a remainder it gives to no token (MLPs and biases); "
            f"the remainder's share |remainder| / (|tokens| + |remainder|) is on average "
            f"{share.mean():.0%} (from {share.min():.0%} to {share.max():.0%} over "
            f"{len(parts)} examples), and the remainder is the larger part in {larger:.0%} "
            f"of the examples.")


def short_name(meta: Mapping | str) -> str:
    """The name of a run's model: the ``id`` of its identity
    (:func:`cmixlib.book.identity.model_identity` of the run's metadata ``meta``; a display
    text, ``meta["model"]``, is read by :func:`cmixlib.book.identity.parse_model_text`), without
    the architecture and provenance that its description adds."""
    if isinstance(meta, str):
        return str(parse_model_text(meta)[0]["id"])
    return str(model_identity(meta)["id"])
