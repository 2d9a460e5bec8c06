"""Why Value Zeroing rollout is (not) faithful to blank-out: Table 3's correlation layer by layer
(chapter 11, "Rollout on a small model"). Beyond the paper: it asks what the depth of the
rollout, the identity term and the open choices of the evaluation do to the [MASK] row."""
from __future__ import annotations

import numpy as np
import pandas as pd

from cmixlib.metrics.statistics import mean_std, spearman_rows
from cmixlib.models.arch import num_layers
from cmixlib.forward.batching import length_batches
from cmixlib.experiments.rollout_depth import AGGREGATIONS, depth_rows, offset_profile, row_entropy
from cmixlib.experiments.common import (BATCH_SIZE, blank_out_rows, exclude_positions, pad_id,
                                        padded_batch)
from cmixlib.experiments.declaration import Experiment
from cmixlib.experiments.runner import Context
from cmixlib.experiments.sources import FINETUNED_MLM_SETTINGS
from cmixlib.experiments.value_zeroing import MLM_ON_BLIMP
from cmixlib.gradients import random_scores
from cmixlib.methods import dispatch as core

__all__ = ["DEPTH_BASES", "DEPTH_REPLACEMENTS", "DEPTH_EXCLUDES", "ROLLOUT_DEPTH"]

#: The layer-wise methods whose rollouts Table 3 scores (their registry base methods).
DEPTH_BASES = ["attention", "attn_norm", "attn_norm_res", "attn_norm_res_ln", "globenc_layer",
               "alti_layer", "value_zeroing"]
#: Blank-out replacement tokens tried (the paper's: [UNK]; [MASK], the token the MLM was trained
#: to read as "unknown word here").
DEPTH_REPLACEMENTS = ["unk", "mask"]
#: Which positions are correlated (``cmixlib.experiments.common.exclude_positions``).
DEPTH_EXCLUDES = ["special+target", "target"]


def _score_matrix(ex: dict, raw: dict[str, np.ndarray], bases: list[str], seed: int):
    """Keys ``(method, aggregation, layer)`` and the ``(K, n)`` matrix of their [MASK]-row
    scores; the controls "random" (seeded as vz-faithfulness's) and "nearness" get aggregation
    "control" and layer 0."""
    t, n = int(ex["target_index"]), len(ex["input_ids"])
    keys, rows = [], []
    for m in bases:
        for agg, r in depth_rows(raw[m], t).items():
            keys += [(m, agg, layer + 1) for layer in range(len(r))]
            rows.append(r)
    keys += [("random", "control", 0), ("nearness", "control", 0)]
    rows += [random_scores(n, seed=seed)[None], -np.abs(np.arange(n) - t)[None].astype(float)]
    return keys, np.concatenate(rows)


def rollout_depth(ctx: Context) -> dict[str, pd.DataFrame]:
    """Per BLiMP test example and for each method of ``bases``: the [MASK] row of every layer's
    row-normalised map ("single"), of the rollout up to that layer without the identity
    ("rollout", Table 3's aggregation at the last layer), with it ("rollout+I":
    0.5 C + 0.5 I) and of the un-normalised product ("raw product";
    :func:`cmixlib.experiments.rollout_depth.depth_rows`), plus the controls random and nearness
    (-|j - t|). Each is correlated (Spearman) with blank-out, p(t|x) - p(t|x, token j ->
    replacement) over target and foil, for each blank-out ``replacements`` token and each
    ``excludes`` mode, then averaged over examples (frame "result": condition, method,
    aggregation, layer, replacement, exclude, mean, std, n, n_nan). Frame "profile": the mean
    weight at offset k = j - i (:func:`cmixlib.experiments.rollout_depth.offset_profile`, |k| <=
    ``max_offset``) of each layer's row-normalised map, over the non-special rows ("rows" =
    "context") and over the [MASK] row ("mask"). Frame "entropy": the mean normalised entropy
    of the [MASK] row per method, aggregation and layer (1 = uniform). Frame "nearness": the
    mean Spearman of each [MASK] row (and of random, and of blank-out with the first
    replacement: method "blank-out") with the nearness control, over the positions of the first
    ``excludes`` mode. Frame "row_profile": the mean score of each of those rows at offset
    k = j - t from the [MASK] (|k| <= ``max_offset``; [CLS] and [SEP] left out)."""
    s = ctx.settings
    bundle, _, examples = ctx.load_inputs()
    bases, K = list(s["bases"]), int(s["max_offset"])
    L = num_layers(bundle.model)
    tok = bundle.tokenizer
    rho: dict[tuple, list[float]] = {}
    prof = {r: {m: [np.zeros((L, 2 * K + 1)), np.zeros(2 * K + 1)] for m in bases}
            for r in ("context", "mask")}
    ent: dict[tuple, list[float]] = {}
    near: dict[tuple, list[float]] = {}
    near_keys = [*((m, agg, layer) for m in bases for agg in AGGREGATIONS   # _score_matrix's
                   for layer in range(1, L + 1)), ("random", "control", 0),     # order, less
                 ("blank-out", s["replacements"][0], 0)]                        # nearness
    row_sum, row_cnt = np.zeros((len(near_keys), 2 * K + 1)), np.zeros(2 * K + 1)
    with ctx.tqdm(None, total=len(examples), desc=f"rollout depth ({s['condition']})") as bar:
        for idx in length_batches([len(ex["input_ids"]) for ex in examples], BATCH_SIZE):
            batch = [examples[i] for i in idx]
            ids, mask = padded_batch(batch, pad_id(tok))
            maps = core.context_mixing(bundle.model, tok, {"input_ids": ids, "attention_mask": mask},
                                       methods=bases, normalize=False)
            blanked = [blank_out_rows(bundle, batch, rep) for rep in s["replacements"]]
            for k, (i, ex, raw) in enumerate(zip(idx, batch,
                                                 maps if isinstance(maps, list) else [maps])):
                t, n = int(ex["target_index"]), len(ex["input_ids"])
                keys, mat = _score_matrix(ex, raw, bases, int(s["seed"]) * 100003 + i)
                bos = [rows[k] for rows in blanked]
                for rep, bo in zip(s["replacements"], bos):
                    for mode in s["excludes"]:
                        keep = np.setdiff1d(np.arange(n), exclude_positions(ex, mode) or [])
                        r = spearman_rows(mat[:, keep], bo[keep])
                        for key, v in zip(keys, r):
                            rho.setdefault((*key, rep, mode), []).append(float(v))
                # the rows and the first blank-out against nearness, and by offset from t
                rows = np.concatenate([mat[:-1], bos[0][None]])       # drops the nearness row
                keep = np.setdiff1d(np.arange(n), exclude_positions(ex, s["excludes"][0]) or [])
                for key, v in zip(near_keys, spearman_rows(rows[:, keep], mat[-1, keep])):
                    near.setdefault(key, []).append(float(v))
                j = t + np.arange(-K, K + 1)
                ok = (j >= 1) & (j <= n - 2)                          # words, not [CLS]/[SEP]
                row_sum += rows[:, np.clip(j, 0, n - 1)] * ok
                row_cnt += ok
                for m in bases:
                    for where, rows in (("context", np.arange(1, n - 1)), ("mask", [t])):
                        S, N = offset_profile(raw[m], rows, K)
                        prof[where][m][0] += S
                        prof[where][m][1] += N
                ents = row_entropy(mat[:-2])
                for key, h in zip(keys[:-2], ents):
                    ent.setdefault(key, []).append(float(h))
            bar.update(len(idx))
    cols = ["method", "aggregation", "layer", "replacement", "exclude"]
    result = pd.DataFrame([{**dict(zip(cols, k)), **mean_std(v)} for k, v in rho.items()])
    result.insert(0, "condition", s["condition"])
    profile = pd.DataFrame([{"condition": s["condition"], "rows": where, "method": m,
                             "layer": layer + 1, "offset": k - K,
                             "weight": S[layer, k] / N[k] if N[k] else float("nan"),
                             "uniform": float("nan")}
                            for where, per in prof.items() for m, (S, N) in per.items()
                            for layer in range(L) for k in range(2 * K + 1)])
    mean_len = float(np.mean([len(ex["input_ids"]) for ex in examples]))
    profile["uniform"] = 1.0 / mean_len            # a uniform row's weight at the mean length
    entropy = pd.DataFrame([{"condition": s["condition"], "method": k[0], "aggregation": k[1],
                             "layer": k[2], "entropy": float(np.mean(v))} for k, v in ent.items()])
    kcols = ["method", "aggregation", "layer"]
    nearness = pd.DataFrame([{"condition": s["condition"], **dict(zip(kcols, k)), **mean_std(v)}
                             for k, v in near.items()])
    row_profile = pd.DataFrame([{"condition": s["condition"], **dict(zip(kcols, key)),
                                 "offset": k - K, "weight": row_sum[a, k] / row_cnt[k]
                                 if row_cnt[k] else float("nan")}
                                for a, key in enumerate(near_keys) for k in range(2 * K + 1)])
    return {"result": result, "profile": profile, "entropy": entropy, "nearness": nearness,
            "row_profile": row_profile}


def _summary(frames) -> str:
    r = frames["result"]
    d = r[(r.replacement == r.replacement.iloc[0]) & (r.exclude == r.exclude.iloc[0])]
    piv = d[d.aggregation != "control"].pivot_table(index=["method", "aggregation"],
                                                    columns="layer", values="mean", sort=False)
    return ("mean Spearman with blank-out per layer (first replacement and exclusion):\n"
            + piv.to_string(float_format=lambda v: f"{v:+.3f}"))


ROLLOUT_DEPTH = Experiment(
    name="vz-rollout-depth",
    title="Faithfulness to blank-out layer by layer: single maps, rollouts with and without I",
    paper="Value Zeroing (Table 3), beyond the paper", inputs=MLM_ON_BLIMP, compute=rollout_depth,
    defaults={"condition": "pretrained", "bases": DEPTH_BASES, "replacements": DEPTH_REPLACEMENTS,
              "excludes": DEPTH_EXCLUDES, "max_offset": 3, **FINETUNED_MLM_SETTINGS, "seed": 0},
    summary=_summary)
