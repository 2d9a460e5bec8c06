r"""Beyond the papers: plausibility of every method's ``[CLS]`` attribution against HateXplain's
human rationales (ERASER's AUPRC, token F1 and IOU F1; :mod:`cmixlib.metrics.plausibility`)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from cmixlib.metrics import plausibility as pl
from cmixlib.metrics.statistics import mean_ci
from cmixlib.methods.registry import ROLLOUT_PREFIX
from cmixlib.experiments.common import (GRADIENT_METHODS, IG_STEPS, batched, pad_id, padded_batch,
                                        predicted_classes)
from cmixlib.experiments.declaration import Experiment
from cmixlib.experiments.runner import Context
from cmixlib.experiments.sources import CLASSIFIER_SETTINGS, Data, Inputs, Model
from cmixlib.gradients import ClassTarget, batch_attribute, random_scores
from cmixlib.methods import dispatch as core
from cmixlib.methods.aggregation import attention_flow, normalize_rows, rollout
from cmixlib.methods.registry import method_label

__all__ = ["PLAUSIBILITY", "PLAUSIBILITY_METHODS", "METRICS", "SUBSETS", "attribution_rows",
           "describe_most_plausible"]


def _mixing_methods() -> list[str]:
    layer = [m for m, spec in core.METHODS.items() if spec.kind == "layer"]
    rolled = {spec.base for spec in core.METHODS.values() if spec.base is not None}
    return list(core.METHODS) + [f"{ROLLOUT_PREFIX}{m}" for m in layer if m not in rolled]


#: Every context-mixing method of :data:`cmixlib.METHODS` (a layer-wise method: its last layer's
#: ``[CLS]`` row; an aggregated method: the row of its rollout up to the last layer), the rollout
#: ``"rollout:X"`` of each layer-wise method the registry has no aggregated method of (N, N-Res,
#: N-ResLN, W-FixedRes, N-FixedRes, W-Res), the gradient baselines of :data:`GRADIENT_METHODS`
#: and the random control.
PLAUSIBILITY_METHODS = _mixing_methods() + list(GRADIENT_METHODS) + ["random"]
#: The per-post metrics (:func:`cmixlib.metrics.plausibility.plausibility_scores`).
METRICS = ("auprc", "token_f1", "iou_f1")
#: The post subsets of frame ``subsets``: every evaluated post, those whose predicted class is
#: the majority label, those predicted hateful or offensive (not ``normal``).
SUBSETS = ("all rationale posts", "correctly predicted", "predicted hateful/offensive")
_METRIC_NAMES = {"auprc": "AUPRC", "token_f1": "token F1", "iou_f1": "IOU F1"}


def attribution_rows(bundle, batch: list[dict], methods: list[str], settings: Mapping,
                     seeds: list[int]) -> list[tuple[int, dict[str, np.ndarray]]]:
    r"""For each post of a padded batch: ``(predicted class, {method: (n,) scores})``, the
    ``[CLS]`` row :math:`C^{L}_{0,:}` of the last layer of each context-mixing method (rows
    normalised to sum to 1; attention flow solved for that row of the last layer only,
    ``attention_flow(..., rows=[0], layers=[-1])``), of ``"rollout:X"`` the row of
    :math:`\hat C^{L} = \tilde C^{L} \cdots \tilde C^{1}` (rows normalised, no identity added, as
    :func:`~cmixlib.experiments.common.target_rows_batch`),
    each gradient method's :math:`\|\cdot\|` of the predicted class's probability w.r.t. the word
    embeddings (one :func:`cmixlib.gradients.batch_attribute` call; IG with ``ig_steps``
    Gauss-Legendre steps, IG and DeepLift aggregated by ``grad_aggregate``), and uniform random
    scores seeded per post."""
    ids, mask = padded_batch(batch, pad_id(bundle.tokenizer))
    lengths = [len(ex["input_ids"]) for ex in batch]
    predicted = predicted_classes(bundle, batch).tolist()
    out: list[dict[str, np.ndarray]] = [{} for _ in batch]
    rolled = [m for m in methods if m.startswith(ROLLOUT_PREFIX)]
    full = sorted({m for m in methods if m in core.METHODS and m != "attention_flow"}
                  | {m.removeprefix(ROLLOUT_PREFIX) for m in rolled})
    inputs = {"input_ids": ids, "attention_mask": mask}
    if full:
        maps = core.context_mixing(bundle.model, bundle.tokenizer, inputs, methods=full,
                                   final_rows=0)       # the [CLS] row of the last layer is read
        maps = maps if isinstance(maps, list) else [maps]
        for b, n in enumerate(lengths):
            for m in methods:
                if m in full:
                    out[b][m] = np.asarray(maps[b][m][-1, 0, :n], dtype=float)
                elif m.removeprefix(ROLLOUT_PREFIX) in full:
                    r = rollout(maps[b][m.removeprefix(ROLLOUT_PREFIX)], add_identity=False,
                                normalize=True, rows=[0])
                    out[b][m] = np.asarray(r[-1, 0, :n], dtype=float)
    if "attention_flow" in methods:
        # only the [CLS] row of the last layer is used: solve that layer's max-flows alone, on
        # the raw attention that cmixlib.context_mixing's "attention_flow" uses, and normalise
        # the row as it does (the same values as context_mixing(..., rows=[[0]]))
        att = core.context_mixing(bundle.model, bundle.tokenizer, inputs, methods=["attention"],
                                  normalize=False)
        att = att if isinstance(att, list) else [att]
        for b, n in enumerate(lengths):
            flow = attention_flow(att[b]["attention"], add_identity=True, rows=[0], layers=[-1])
            out[b]["attention_flow"] = np.asarray(normalize_rows(flow[-1, :1])[0, :n], dtype=float)
    grad = [m for m in methods if m in GRADIENT_METHODS]
    if grad:
        # the classes predicted above (the same forward that batch_attribute would run again)
        res = batch_attribute(bundle.model, ids, [ClassTarget(p, score="prob") for p in predicted],
                              [GRADIENT_METHODS[m] for m in grad], "input", attention_mask=mask,
                              tokenizer=bundle.tokenizer, n_steps=int(settings["ig_steps"]),
                              aggregate=settings["grad_aggregate"])
        for b, n in enumerate(lengths):
            for m in grad:
                out[b][m] = np.asarray(res[GRADIENT_METHODS[m]][b][:n], dtype=float)
    if "random" in methods:
        for b, n in enumerate(lengths):
            out[b]["random"] = random_scores(int(n), seed=seeds[b])
    return [(int(p), {m: o[m] for m in methods}) for p, o in zip(predicted, out)]


def _summary_rows(per: pd.DataFrame, methods: list[str], confidence: float) -> list[dict]:
    rows = []
    for m in methods:
        g = per[per["method"] == m]
        row: dict = {"method": m, "label": method_label(m), "n": int(len(g))}
        for metric in METRICS:
            ci = mean_ci(g[metric], confidence)
            row.update({metric: ci["mean"], f"{metric}_ci_low": ci["ci_low"],
                        f"{metric}_ci_high": ci["ci_high"]})
        rows.append(row | {"confidence": float(confidence)})
    return rows


def plausibility(ctx: Context) -> dict[str, pd.DataFrame]:
    r"""Plausibility against HateXplain's rationales (``split``, default the test split; the
    committed classifier was tuned on val). Posts: those whose majority rationale marks a word
    (:func:`cmixlib.data.load_hatexplain_rationale_inputs`: a word is in the rationale when more
    than half of the post's 3 annotators marked it), the first ``limit`` of them. Per post and
    method of :data:`PLAUSIBILITY_METHODS`: the ``[CLS]`` row of the attribution
    (:func:`attribution_rows`; gradients of the class the model predicts),
    pooled to HateXplain's words by ``pooling`` (default the sum of a word's pieces; ``[CLS]`` and
    ``[SEP]`` belong to no word), then AUPRC, token F1 and IOU F1 against the rationale (top
    :math:`k = |\text{rationale}|` words; :mod:`cmixlib.metrics.plausibility`). Frame ``result``: per
    method, the mean over all evaluated posts with a two-sided ``confidence`` t interval
    (:func:`~cmixlib.metrics.statistics.mean_ci`); ``subsets``: the same for :data:`SUBSETS`; ``per_post``: every score."""
    s = ctx.settings
    methods = list(s["methods"])
    unknown = [m for m in methods if m not in PLAUSIBILITY_METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {PLAUSIBILITY_METHODS}")
    if s["pooling"] not in pl.WORD_POOLING:
        raise ValueError(f"pooling must be one of {pl.WORD_POOLING}, not {s['pooling']!r}")
    bundle, _, examples = ctx.load_inputs()
    seed = int(s["seed"])
    rows = batched(ctx, examples, lambda batch: attribution_rows(
        bundle, batch, methods, s, [seed * 100003 + int(ex["idx"]) for ex in batch]),
        desc="plausibility")
    records = []
    for i, ex in enumerate(examples):
        predicted, scores = rows[i]
        for m in methods:
            words = pl.word_scores(scores[m], ex["word_to_tokens"], s["pooling"])
            records.append({"idx": int(ex["idx"]), "id": ex["id"], "label": int(ex["label"]),
                            "predicted": predicted, "n_words": len(ex["rationale"]),
                            "rationale_size": int(sum(ex["rationale"])), "method": m,
                            **pl.plausibility_scores(words, ex["rationale"])})
    per = pd.DataFrame(records, columns=["idx", "id", "label", "predicted", "n_words",
                                         "rationale_size", "method", *METRICS])
    names = getattr(getattr(bundle.model, "config", None), "id2label", None) or {}
    normal = next((int(k) for k, v in names.items() if str(v).lower() == "normal"), 1)
    masks = {SUBSETS[0]: np.ones(len(per), dtype=bool),
             SUBSETS[1]: (per["predicted"] == per["label"]).to_numpy(),
             SUBSETS[2]: (per["predicted"] != normal).to_numpy()}
    conf = float(s["confidence"])
    subsets = pd.DataFrame([{"subset": name, **row} for name, keep in masks.items()
                            for row in _summary_rows(per[keep], methods, conf)])
    posts = per.drop_duplicates("idx")
    ctx.info["posts"] = {"evaluated": int(len(posts)),
                         "correctly_predicted": int((posts["predicted"] == posts["label"]).sum()),
                         "predicted_hateful_or_offensive": int((posts["predicted"] != normal).sum()),
                         "predicted": {str(names.get(k, k)): int(v) for k, v in
                                       posts["predicted"].value_counts().sort_index().items()}}
    ctx.note(f"{len(posts)} posts of the {s['split']} split with a majority rationale; "
             f"{ctx.info['posts']['predicted_hateful_or_offensive']} predicted hateful or offensive, "
             f"{ctx.info['posts']['correctly_predicted']} predicted as their majority label")
    result = pd.DataFrame(_summary_rows(per, methods, conf))
    return {"result": result, "subsets": subsets, "per_post": per}


def _summary(frames) -> str:
    r = frames["result"]
    cells = r.assign(**{m: [f"{v:.3f} [{lo:.3f}, {hi:.3f}]" for v, lo, hi in
                            zip(r[m], r[f"{m}_ci_low"], r[f"{m}_ci_high"])] for m in METRICS})
    return (f"mean per post [{r['confidence'].iloc[0]:.0%} t interval], n = {int(r['n'].max())} "
            "posts:\n" + cells.sort_values("auprc", ascending=False)[
                ["label", "auprc", "token_f1", "iou_f1"]].to_string(index=False))


def describe_most_plausible(result: pd.DataFrame, metric: str = "auprc",
                            per_post: pd.DataFrame | None = None) -> str:
    r"""One sentence naming the most plausible method by ``metric`` and whether its interval
    overlaps the runner-up's, generated from a ``result`` frame of ``hatexplain-plausibility``.

    Rule: methods are ordered by their mean :math:`\bar v_m`; the top group is every method whose
    mean equals the highest (to 1e-12: maps that rank the words identically, e.g. ones that differ
    only in ``[CLS]``'s own entry), the runner-up group the methods with the next mean. The two
    intervals *overlap* when :math:`\text{low}_{top} \le \text{high}_{runner-up}`. Overlapping
    intervals do not show the two equal; separate ones show the top method ahead at that
    confidence. With ``per_post`` (frame ``per_post``), the sentence adds the mean paired
    difference per post with its t interval (:func:`~cmixlib.metrics.statistics.mean_ci`, the result's confidence)."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
    r = result.sort_values(metric, ascending=False, kind="stable").reset_index(drop=True)
    if len(r) < 2:
        raise ValueError("need at least two methods to compare")
    best = r[metric].iloc[0]
    top = r[np.isclose(r[metric], best, rtol=0, atol=1e-12)]
    rest = r.iloc[len(top):]
    if rest.empty:
        return f"Every method has the same mean {metric} ({best:.3f})."
    runner = rest[np.isclose(rest[metric], rest[metric].iloc[0], rtol=0, atol=1e-12)]
    conf = float(r["confidence"].iloc[0])

    def names(group):
        return " = ".join(method_label(m) for m in group["method"])

    def cell(row):
        return f"{row[metric]:.3f} [{row[f'{metric}_ci_low']:.3f}, {row[f'{metric}_ci_high']:.3f}]"

    a, b = top.iloc[0], runner.iloc[0]
    overlap = a[f"{metric}_ci_low"] <= b[f"{metric}_ci_high"]
    text = (f"By mean {_METRIC_NAMES[metric]} the most plausible "
            f"{'method is' if len(top) == 1 else 'methods are'} {names(top)}, {cell(a)} "
            f"({conf:.0%} t interval); {'its' if len(top) == 1 else 'their'} interval "
            f"{'overlaps' if overlap else 'does not overlap'} that of the runner-up, "
            f"{names(runner)}, {cell(b)}")
    if per_post is not None:
        pa = per_post[per_post["method"] == a["method"]].set_index("idx")[metric]
        pb = per_post[per_post["method"] == b["method"]].set_index("idx")[metric]
        d = mean_ci((pa - pb.reindex(pa.index)).to_numpy(), conf)
        text += (f"; the paired difference per post is {d['mean']:+.3f} "
                 f"[{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]")
    return text + "."


PLAUSIBILITY = Experiment(
    name="hatexplain-plausibility",
    title="Plausibility of [CLS] attributions against HateXplain's human rationales",
    paper="beyond the papers", compute=plausibility,
    inputs=Inputs(Model("classifier", "hatexplain"), Data("hatexplain_rationales")),
    defaults={"methods": PLAUSIBILITY_METHODS, "split": "test", "pooling": "sum",
              "ig_steps": IG_STEPS, "grad_aggregate": "l2", "confidence": 0.95, "seed": 0,
              **CLASSIFIER_SETTINGS},
    summary=_summary)
