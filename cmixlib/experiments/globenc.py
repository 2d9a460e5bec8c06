"""The GlobEnc paper's experiments (Modarressi et al. 2022): correlation of attribution rows with
gradient×input saliency (Table 1, Figure 3, Table 2), single-layer agreement with HTA maps
(Figure 4) and the LayerNorm outlier weights (Figure 5)."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from cmixlib.metrics.statistics import map_agreement, mean_ci, mean_std, spearman, spearman_rows
from cmixlib.data import paper_numbers as pn
from cmixlib.experiments.common import (batched, comparison_table, ids_tensor, pad_id,
                                        padded_batch)
from cmixlib.experiments.controls import CONTROLS, control_scores, control_seed
from cmixlib.experiments.declaration import Experiment
from cmixlib.experiments.runner import Context
from cmixlib.experiments.sources import (CLASSIFIER_SETTINGS, SST2_CLASSIFIER, Data, Inputs, Model,
                                         whole_split)
from cmixlib.gradients import ClassTarget, batch_attribute
from cmixlib.methods import dispatch as core
from cmixlib.methods.aggregation import normalize_rows, rollout
from cmixlib.methods.hta import hta
from cmixlib.models.arch import layer_parts

__all__ = ["LN_OUTLIERS", "CORRELATIONS", "HTA_AGREEMENT", "GLOBENC_METHODS", "ROLLOUT_VARIANTS",
           "variant_comparison", "rollout_variant", "correlation_rows", "FIG4_METHODS",
           "FIG4_VARIANTS"]

# ============================================================================================
# Figure 5: LN#1 / LN#2 outlier weights
# ============================================================================================
def ln_outliers(ctx: Context) -> dict[str, pd.DataFrame]:
    """Per layer: Pearson correlation between the LN#1 and LN#2 gains (gamma) on the outlier
    dimensions (>= ``sigma`` std from the mean gain; ``outliers`` = "ln1", "ln2" or "union" of both
    layers' outlier sets). Needs only the model weights. The paper prints no numbers (figure only)."""
    from scipy.stats import pearsonr

    bundle, _, _ = ctx.load_inputs()
    layers = layer_parts(bundle.model)
    ctx.info["data_size"] = f"{len(layers)} layers (weights only)"
    sigma, which = float(ctx.settings["sigma"]), ctx.settings["outliers"]
    rows, weights = [], []
    for i, mods in enumerate(layers):
        g1 = mods.ln1.weight.detach().cpu().numpy().astype(float)
        g2 = mods.ln2.weight.detach().cpu().numpy().astype(float)
        o1 = np.abs(g1 - g1.mean()) >= sigma * g1.std()
        o2 = np.abs(g2 - g2.mean()) >= sigma * g2.std()
        sel = {"ln1": o1, "ln2": o2, "union": o1 | o2}[which]
        k = int(sel.sum())
        r = float(pearsonr(g1[sel], g2[sel]).statistic) if k >= 3 and np.ptp(g1[sel]) > 0 and np.ptp(g2[sel]) > 0 else float("nan")
        rows.append({"layer": i + 1, "pearson": r, "n_outlier_dims": k, "n_ln1_outliers": int(o1.sum()),
                     "n_ln2_outliers": int(o2.sum()), "corr_all_dims": float(np.corrcoef(g1, g2)[0, 1])})
        weights += [{"layer": i + 1, "dim": d, "ln1": g1[d], "ln2": g2[d], "outlier": bool(sel[d])}
                    for d in range(g1.size)]
    return {"result": pd.DataFrame(rows), "weights": pd.DataFrame(weights)}


LN_OUTLIERS = Experiment(
    name="globenc-fig5-ln-outliers", title="Correlation of LN#1 and LN#2 outlier weights per layer",
    paper="GlobEnc (Figure 5)", inputs=Inputs(Model("base")), compute=ln_outliers,
    defaults={"sigma": 3.0, "outliers": "union"})


# ============================================================================================
# Table 1, Figure 3, Table 2
# ============================================================================================
GLOBENC_METHODS = ["attention", "w_fixedres", "w_res", "attn_norm", "n_fixedres", "attn_norm_res",
                   "attn_norm_res_ln", "globenc_layer"]
_TASK_LABEL = {"sst2": "SST-2", "mnli": "MNLI", "hatexplain": "HateXplain"}


#: The two ways of rolling out GlobEnc's maps (column ``rollout`` of the result): "raw" multiplies
#: the un-normalised layer maps (GlobEnc's own code; the paper's numbers), "row-normalised"
#: normalises every layer's rows first and every product's rows after (the book's other chapters).
ROLLOUT_VARIANTS = ("raw", "row-normalised")


def rollout_variant(settings) -> str:
    """The rollout variant (:data:`ROLLOUT_VARIANTS`) that ``settings["rollout_normalize"]`` selects."""
    return ROLLOUT_VARIANTS[int(bool(settings["rollout_normalize"]))]


def _padded_segments(batch: list[dict], ids) -> dict:
    """``{"token_type_ids": (B, n)}`` of a padded batch whose examples hold segment ids (sentence
    pairs: MNLI), 0 at padding; ``{}`` when none does. The classifier and every attribution then
    see the pair as the classifier was trained on it."""
    if not any("token_type_ids" in ex for ex in batch):
        return {}
    tt = torch.zeros_like(ids)
    for b, ex in enumerate(batch):
        seg = ex.get("token_type_ids")
        if seg is not None:
            tt[b, :len(seg)] = torch.as_tensor(list(seg), dtype=torch.long)
    return {"token_type_ids": tt}


def correlation_rows(bundle, batch: list[dict], methods: list[str], level: str,
                      controls=(), seed: int = 0) -> list[dict[tuple[str, str, str], np.ndarray]]:
    """For each example of a padded batch: ``{(rollout variant, method, aggregation): rho per
    layer}``, the Spearman of the [CLS] rows with the true class's gradient × input saliency (one
    :func:`cmixlib.gradients.batch_attribute` call and one padded forward for the maps); and
    ``{("control", c, "control"): rho}`` for each of ``controls``
    (:func:`cmixlib.experiments.controls.control_scores`, target 0, the random one seeded with
    the example's ``_row`` index)."""
    ids, mask = padded_batch(batch, pad_id(bundle.tokenizer))
    extras = _padded_segments(batch, ids)
    targets = [ClassTarget(int(ex["label"])) for ex in batch]
    sal = batch_attribute(bundle.model, ids, targets, "grad_x_input_l2", level,
                          attention_mask=mask, **extras)["grad_x_input_l2"]
    maps = core.context_mixing(bundle.model, bundle.tokenizer,
                               {"input_ids": ids, "attention_mask": mask, **extras},
                               methods=methods, normalize=False,
                               final_rows=0)   # the last layer: [CLS] row only
    maps = maps if isinstance(maps, list) else [maps]
    out = []
    for b, ex in enumerate(batch):
        n = len(ex["input_ids"])
        ref = sal[b][0, :n] if level == "layers" else sal[b][:n]
        rho: dict[tuple[str, str, str], np.ndarray] = {}
        # every method's [CLS] rows (single layers, both rollouts): one rank correlation call
        rows = {(m, "individual"): maps[b][m][:, 0] for m in methods}
        for m in methods:
            rows[(m, "raw")] = rollout(maps[b][m], add_identity=False, normalize=False,
                                       rows=[0])[:, 0]
            rows[(m, "row-normalised")] = rollout(normalize_rows(maps[b][m]), add_identity=False,
                                                  normalize=True, rows=[0])[:, 0]
        L = maps[b][methods[0]].shape[0]
        rhos = spearman_rows(np.concatenate(list(rows.values())), ref)
        got = {key: rhos[k * L:(k + 1) * L] for k, key in enumerate(rows)}
        for m in methods:
            for variant in ROLLOUT_VARIANTS:
                rho[(variant, m, "rollout")] = got[(m, variant)]
                rho[(variant, m, "individual")] = got[(m, "individual")]
        for c, sc in control_scores(n, 0, control_seed(seed, ex.get("_row", b)), controls).items():
            rho[("control", c, "control")] = np.array([spearman(sc, ref)])
        out.append(rho)
    return out


def correlations(ctx: Context) -> dict[str, pd.DataFrame]:
    """For each validation example of a fine-tuned classifier: saliency s_j = ||dλ_c/de_j ⊙ e_j||_2
    with λ_c the true-class logit and e_j the embedding-layer output (``hidden_states[0]``; level
    "layers" row 0 of cmixlib.gradients); Spearman with the [CLS] row of (a) the rollout up to each
    layer (Table 1 = last layer, Figure 3 = all layers) and (b) each single layer map (Table 2
    "Indiv."). Rollout without identity, in both :data:`ROLLOUT_VARIANTS` from the same maps
    (column ``rollout``; a single layer's [CLS] row has the same ranks in both, so (b) is one
    number reported under both). Frame ``variants`` has both; ``result`` (compared with the
    paper) has the one ``rollout_normalize`` picks (default False: the raw rollout of GlobEnc's
    code). Frame ``controls``: the same correlation for the sanity baselines ``controls``
    (random, seeded per example with ``seed``; nearness -j, earlier tokens first), one per
    example and task (columns task, method, mean, std, n, n_nan). MNLI's premise-hypothesis
    pairs keep their segment ids (``token_type_ids``) in the saliency and in the maps, as the
    classifier was trained."""
    s = ctx.settings
    methods = list(s["methods"])
    level = {"embeddings": "layers", "input": "input"}[s["saliency_level"]]
    frames = []
    for task in s["tasks"]:
        bundle, _, examples = ctx.load_inputs(task)
        examples = [dict(ex, _row=i) for i, ex in enumerate(examples)]
        rhos = batched(ctx, examples, lambda batch: correlation_rows(
            bundle, batch, methods, level, s["controls"], int(s["seed"])), desc=f"GlobEnc ({task})")
        per: dict[tuple[str, str, str], list[np.ndarray]] = {}
        for i in range(len(examples)):
            for key, v in rhos[i].items():
                per.setdefault(key, []).append(v)
        rows = [{"task": _TASK_LABEL[task], "rollout": variant, "method": m, "aggregation": agg,
                 "layer": layer + 1, **mean_std(v[:, layer])}
                for (variant, m, agg), vals in per.items() for v in [np.stack(vals)]
                for layer in range(v.shape[1])]
        frames.append(pd.DataFrame(rows))
    both = pd.concat(frames, ignore_index=True)
    controls = both[both["rollout"] == "control"]
    both = both[both["rollout"] != "control"].reset_index(drop=True)
    chosen = both[both["rollout"] == rollout_variant(s)].reset_index(drop=True)
    return {"result": chosen, "variants": both,
            "controls": controls.drop(columns=["rollout", "aggregation", "layer"])
            .reset_index(drop=True)}


def _correlations_compare(frames, paper):
    r = frames["result"]
    last = r[(r.aggregation == "rollout") & (r.layer == r.layer.max())].rename(columns={"method": "cmix_method"})
    return comparison_table(last, paper, ["cmix_method", "task"], paper_filter={"table": "Table 1"})


def variant_comparison(res, variant: str) -> pd.DataFrame:
    """Table 1 of a ``globenc-correlations`` result with rollout ``variant`` (one of
    :data:`ROLLOUT_VARIANTS`) beside the paper's, like ``res.comparison()`` for the variant the
    run was asked for."""
    if variant not in ROLLOUT_VARIANTS:
        raise ValueError(f"variant must be one of {ROLLOUT_VARIANTS}, not {variant!r}")
    both = res.frames["variants"]
    return _correlations_compare({"result": both[both["rollout"] == variant]}, res.paper)


CORRELATIONS = Experiment(
    name="globenc-correlations",
    title="Spearman of [CLS] attribution rows with gradient×input saliency, per layer",
    paper="GlobEnc (Table 1, Figure 3, Table 2)", compute=correlations,
    inputs=Inputs(Model("classifier", "{task}"), Data("classification_inputs", "{task}")),
    defaults={"tasks": ["sst2"], "methods": GLOBENC_METHODS, "rollout_normalize": False,
              "saliency_level": "embeddings", "controls": list(CONTROLS), "seed": 0,
              **CLASSIFIER_SETTINGS},
    paper_numbers=pn.globenc_table1, compare=_correlations_compare)


# ============================================================================================
# Figure 4: single-layer agreement with HTA
# ============================================================================================
#: GlobEnc Figure 4's attribution maps: N-Res, N-ResLN and N-Enc (single layers, no rollout).
FIG4_METHODS = ["attn_norm_res", "attn_norm_res_ln", "globenc_layer"]

#: The three readings of GlobEnc Figure 4's "Pearson correlation of HTA maps with attribution maps"
#: that :func:`hta_agreement` reports side by side, all from the same maps. "map_raw" (the main
#: one): the whole n x n maps flattened, **un-normalised** (the caption's literal reading; GlobEnc's
#: code keeps raw norms and its HTA files are "undiv"), so that rows with larger totals weigh more.
#: "rows": per row i over all columns, mean over rows (the granularity of GlobEnc's
#: ``compute_spearman_correlation_hta``); "rows_off_diagonal": the same without j = i. A row-wise
#: correlation cannot see a per-row rescaling, such as N-ResLN's division by token i's LN#1 scale.
FIG4_VARIANTS: dict[str, dict] = {"map_raw": {"unit": "map", "diagonal": True},
                                  "rows": {"unit": "row", "diagonal": True},
                                  "rows_off_diagonal": {"unit": "row", "diagonal": False}}


def hta_agreement(ctx: Context) -> dict[str, pd.DataFrame]:
    """GlobEnc Figure 4 on the SST-2 classifier of ``globenc-correlations`` (:meth:`Sources.classifier`):
    for the first ``limit`` dev sentences (with ``max_tokens``, only those of at most that many
    tokens, [CLS]/[SEP] included; None: no cap; GlobEnc: the first 256), each layer's HTA × input map (:func:`cmixlib.methods.hta.hta`,
    c_ij = ||d e_i / d e_j ⊙ e_j||_F of that layer alone) is compared with the same layer's maps of
    ``methods`` (no rollout) by :func:`~cmixlib.metrics.statistics.map_agreement` with ``correlation`` (Pearson, as the caption),
    in the three :data:`FIG4_VARIANTS` (column ``variant``; the main reading "map_raw" correlates
    the whole un-normalised maps, all rows and columns, [CLS]/[SEP] and the diagonal included). Per
    layer: mean over sentences with a two-sided ``confidence`` t interval (the figure shows 99%
    intervals). The paper prints no numbers; its claim: N-ResLN agrees much less with HTA than N-Res
    and N-Enc."""
    s = ctx.settings
    map_agreement(np.eye(2), np.eye(2), correlation=s["correlation"])   # validates the setting
    methods = list(s["methods"])
    bundle, _, pool = ctx.load_inputs()
    cap = s["max_tokens"]
    examples = [ex for ex in pool if cap is None or len(ex["input_ids"]) <= int(cap)]
    examples = examples if ctx.limit is None else examples[:ctx.limit]
    ctx.info["data_size"] = len(examples)
    ctx.note(f"sentences: the first {len(examples)} SST-2 dev sentences"
             + (f" with at most {cap} tokens" if cap is not None else "") + " "
             f"(mean length {np.mean([len(e['input_ids']) for e in examples]) if examples else 0:.1f} tokens)")
    rows, seconds = [], []
    for k, ex in enumerate(ctx.tqdm(examples, desc="HTA")):
        ids = {"input_ids": ids_tensor(ex)}
        t0 = time.perf_counter()
        ref = hta(bundle.model, bundle.tokenizer, ids, times_input=bool(s["times_input"]), normalize=False)
        seconds.append(time.perf_counter() - t0)
        maps = core.context_mixing(bundle.model, bundle.tokenizer, ids, methods=methods, normalize=False)
        for variant, kw in FIG4_VARIANTS.items():
            for m in methods:
                for layer in range(ref.shape[0]):
                    rows.append({"example": k, "n_tokens": len(ex["input_ids"]), "variant": variant, "method": m,
                                 "layer": layer + 1,
                                 "value": map_agreement(maps[m][layer], ref[layer], correlation=s["correlation"], **kw)})
    per = pd.DataFrame(rows, columns=["example", "n_tokens", "variant", "method", "layer", "value"])
    result = pd.DataFrame([{"variant": v, "method": m, "layer": layer, **mean_ci(g["value"], s["confidence"])}
                           for (v, m, layer), g in per.groupby(["variant", "method", "layer"], sort=False)])
    ctx.info["hta_seconds_per_sentence"] = [round(x, 2) for x in seconds]
    return {"result": result, "per_example": per}


def _fig4_summary(frames) -> str:
    df = frames["result"]
    df = df[df["variant"] == "map_raw"]
    cell = df.assign(text=[f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in zip(df["mean"], df["ci_low"], df["ci_high"])])
    cells = cell.pivot(index="layer", columns="method", values="text")
    conf = df["confidence"].iloc[0] if len(df) else float("nan")
    return (f"mean correlation with HTA × input per layer [{conf:.0%} t interval over sentences], "
            f"n = {int(df['n'].max()) if len(df) else 0} sentences (variant 'map_raw'; 'rows' and "
            "'rows_off_diagonal' are in result.csv):\n" + cells.to_string())


HTA_AGREEMENT = Experiment(
    name="globenc-fig4-hta",
    title="Single-layer correlation of N-Res / N-ResLN / N-Enc maps with HTA × input maps (SST-2)",
    paper="GlobEnc (Figure 4)", compute=hta_agreement,
    inputs=Inputs(SST2_CLASSIFIER, Data("sst2", limit=whole_split)),
    defaults={"methods": FIG4_METHODS, "correlation": "pearson", "max_tokens": None,
              "times_input": True, "confidence": 0.99, **CLASSIFIER_SETTINGS},
    summary=_fig4_summary)
