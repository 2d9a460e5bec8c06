"""The Value Zeroing paper's experiments (Mohebbi et al. 2023), on BLiMP agreement with the MLM
of a condition (pre-trained or prompt-fine-tuned): layer-wise cue alignment (§5, Figures 1, 2,
A.2), the distance ablation (Appendix A.1), MDL probing against alignment (§6, Figure 3,
Table 2) and faithfulness against blank-out (§7, Table 3)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from cmixlib.metrics import evaluation as ev
from cmixlib.metrics.paired import paired_alignment
from cmixlib.metrics.statistics import correlation_table, spearman, spearman_rows, spearman_to
from cmixlib.data import paper_numbers as pn
from cmixlib.forward.batching import length_batches
from cmixlib.methods.value_zeroing import value_zeroing_variant_maps
from cmixlib.experiments.common import (BATCH_SIZE, IG_STEPS, batched, batched_rows, blank_out_rows,
                                        comparison_table, exclude_positions, pad_id,
                                        padded_batch)
from cmixlib.experiments.declaration import Experiment
from cmixlib.experiments.runner import Context, run_experiment
from cmixlib.experiments.sources import FINETUNED_MLM_SETTINGS, Data, Inputs, Model
from cmixlib.metrics.probing import mdl_by_layer

__all__ = ["VZ_LAYER_METHODS", "VZ_GLOBAL_METHODS", "VZ_DISTANCE_VARIANTS", "CUE_ALIGNMENT",
           "DISTANCE_ABLATION", "MDL_PROBING", "FAITHFULNESS", "align_key_note"]

VZ_LAYER_METHODS = ["random", "attention", "attn_norm", "attn_norm_res", "attn_norm_res_ln", "globenc_layer",
                    "alti_layer", "value_zeroing", "grad_x_input", "integrated_gradients", "deeplift"]
VZ_GLOBAL_METHODS = ["random", "attention_rollout", "rollout:attn_norm", "rollout:attn_norm_res",
                     "rollout:attn_norm_res_ln", "globenc", "alti", "value_zeroing_rollout", "grad_x_input",
                     "integrated_gradients", "deeplift"]

#: Every experiment here: the MLM of the run's ``condition`` on BLiMP agreement test examples.
MLM_ON_BLIMP = Inputs(Model("mlm", "{condition}"), Data("blimp"))

_GRADIENTS = {"grad_score": "prob", "grad_aggregate": "l2", "ig_steps": IG_STEPS}
_CONDITION_LABEL = {"pretrained": "pre-trained", "finetuned": "fine-tuned"}


def _compare_by_condition(ours: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    ours = ours.assign(condition=ours["condition"].map(_CONDITION_LABEL))
    return comparison_table(ours, paper[paper.condition.isin(set(ours.condition))], ["cmix_method", "condition"])


# ============================================================================================
# §5: cue alignment per layer and method
# ============================================================================================
def cue_alignment(ctx: Context) -> dict[str, pd.DataFrame]:
    """For each BLiMP agreement test example, the [MASK] row of every method at every layer is
    normalised (negatives clipped) and compared with the binary cue vector: dot product, average
    precision, probes-needed. Gradients are taken w.r.t. each layer's input representations of the
    MLM score (``grad_score``: "prob" = softmax over target and foil). ``exclude``: "none" (default,
    as the paper), "special", "target" or "special+target", with renormalisation. The paper shows
    these as heat maps only (no printed numbers). Frames: ``result`` (mean, std, n per method,
    layer and metric over every example), ``result_by_paradigm`` (the same per BLiMP
    paradigm ``uid``, so that another model can be compared on the same paradigms) and
    ``pairs`` (every two methods' paired differences over the same examples,
    :func:`cmixlib.metrics.paired.paired_alignment`, for their standard errors)."""
    s = ctx.settings
    bundle, _, examples = ctx.load_inputs()
    rows, uids = [], {}
    for i, ex, m in batched_rows(ctx, bundle, examples, level="layers", desc=f"cue alignment ({s['condition']})"):
        rows += ev.alignment_rows(m, ex["cue_indices"], example_id=i,
                                  exclude=exclude_positions(ex, s["exclude"]), ties=s["ties"])
        uids[i] = ex.get("uid")
    per_ex = pd.DataFrame(rows).sort_values("example", kind="stable")
    agg = ev.aggregate_alignment(per_ex)
    agg.insert(0, "condition", s["condition"])
    by_paradigm = ev.aggregate_alignment(per_ex.assign(uid=per_ex["example"].map(uids)),
                                         by=("uid", "method", "layer"))
    by_paradigm.insert(0, "condition", s["condition"])
    pairs = paired_alignment(per_ex)
    pairs.insert(0, "condition", s["condition"])
    return {"result": agg, "result_by_paradigm": by_paradigm, "pairs": pairs}


def _alignment_summary(frames) -> str:
    df = frames["result"]
    parts = []
    for metric in ("dot", "ap", "probes_needed"):
        piv = df[df.metric == metric].pivot_table(index="method", columns="layer", values="mean", sort=False)
        parts.append(f"{metric} (mean over examples; rows = method, columns = layer 0..L-1):\n"
                     + piv.to_string(float_format=lambda v: f"{v:.3f}"))
    return "\n".join(parts)


CUE_ALIGNMENT = Experiment(
    name="vz-cue-alignment", title="Layer-wise cue alignment (dot, AP, probes-needed) on BLiMP agreement",
    paper="Value Zeroing (Figures 1, 2, A.2)", inputs=MLM_ON_BLIMP, compute=cue_alignment,
    defaults={"condition": "pretrained", "methods": VZ_LAYER_METHODS, "exclude": "none",
              "ties": "optimistic", **_GRADIENTS, **FINETUNED_MLM_SETTINGS, "seed": 0},
    summary=_alignment_summary)


# ============================================================================================
# Appendix A.1: the distance used in Value Zeroing
# ============================================================================================
VZ_DISTANCE_VARIANTS = {"cosine": ("cosine", False), "euclidean": ("euclidean", False),
                        "spearman": ("spearman", False), "cosine, standardised": ("cosine", True)}


def distance_ablation(ctx: Context) -> dict[str, pd.DataFrame]:
    """Layer-wise cue alignment (as ``vz-cue-alignment``) of Value Zeroing computed with each
    distance of Appendix A.1: cosine (the paper's), Euclidean, Spearman (1 - rank correlation of the
    two representations) and cosine after per-dimension standardisation of the representations
    (Timkey & van Schijndel 2021; mean and std over the sentence's tokens, see
    :func:`cmixlib.methods.value_zeroing.value_zeroing_layer`). Also the Spearman correlation of each
    variant's [MASK] row with the cosine row, per layer ("agreement"). The paper reports no numbers,
    only that the pattern did not change."""
    s = ctx.settings
    unknown = [v for v in s["variants"] if v not in VZ_DISTANCE_VARIANTS]
    if unknown:
        raise ValueError(f"Unknown variant(s) {unknown}; choose from {list(VZ_DISTANCE_VARIANTS)}.")
    bundle, _, examples = ctx.load_inputs()
    # one forward and one set of perturbed outputs per batch serve every distance
    variants = [(VZ_DISTANCE_VARIANTS[v][0], VZ_DISTANCE_VARIANTS[v][1] or None)
                for v in s["variants"]]
    rows, agree = [], []
    with ctx.tqdm(None, total=len(examples), desc=f"VZ distances ({s['condition']})") as bar:
        for idx in length_batches([len(ex["input_ids"]) for ex in examples], BATCH_SIZE):
            batch = [examples[i] for i in idx]
            ids, mask = padded_batch(batch, pad_id(bundle.tokenizer))
            targets = [int(ex["target_index"]) for ex in batch]
            per_example = value_zeroing_variant_maps(bundle.model, ids, mask, [[t] for t in targets],
                                                     variants=variants)
            for k, (i, ex) in enumerate(zip(idx, batch)):
                maps = {v: per_example[k][c, :, 0] for c, v in enumerate(s["variants"])}
                rows += ev.alignment_rows(maps, ex["cue_indices"], example_id=i,
                                          exclude=exclude_positions(ex, s["exclude"]), ties=s["ties"])
                if "cosine" in maps:
                    agree += [{"example": i, "variant": v, "layer": layer, "spearman": rho}
                              for v in maps for layer, rho in
                              enumerate(spearman_rows(maps[v], maps["cosine"]))]
            bar.update(len(idx))
    per_ex = pd.DataFrame(rows).sort_values("example", kind="stable").rename(columns={"method": "variant"})
    agg = ev.aggregate_alignment(per_ex, by=("variant", "layer"))
    agg.insert(0, "condition", s["condition"])
    agreement = (pd.DataFrame(agree).groupby(["variant", "layer"], sort=False)["spearman"].mean().reset_index()
                 if agree else pd.DataFrame(columns=["variant", "layer", "spearman"]))
    return {"result": agg, "agreement": agreement}


def _distance_summary(frames) -> str:
    df = frames["result"]
    piv = df[df.metric == "dot"].pivot_table(index="variant", columns="layer", values="mean", sort=False)
    agree = frames["agreement"].pivot_table(index="variant", columns="layer", values="spearman", sort=False)
    return ("dot product per layer (mean over examples):\n" + piv.to_string(float_format=lambda v: f"{v:.3f}")
            + "\n\nSpearman of each variant's [MASK] row with the cosine row (mean over examples):\n"
            + agree.to_string(float_format=lambda v: f"{v:.3f}"))


DISTANCE_ABLATION = Experiment(
    name="vz-distance-ablation",
    title="Value Zeroing with cosine, Euclidean, Spearman and standardised-cosine distances",
    paper="Value Zeroing (Appendix A.1, Figure A.1)", inputs=MLM_ON_BLIMP, compute=distance_ablation,
    defaults={"condition": "pretrained", "variants": list(VZ_DISTANCE_VARIANTS), "exclude": "none",
              "ties": "optimistic", **FINETUNED_MLM_SETTINGS},
    summary=_distance_summary)


# ============================================================================================
# §6: MDL probing per layer, and Table 2
# ============================================================================================
def _mask_states(bundle, examples, ctx) -> np.ndarray:
    """(L+1, N, d) hidden states at the target position: one right-padded forward per length
    batch (the real positions of a padded row equal the unpadded forward's up to rounding)."""
    pad = pad_id(bundle.tokenizer)
    device = next(bundle.model.parameters()).device  # the ids go where the model is (CUDA too)
    feats: list[np.ndarray] = [None] * len(examples)  # type: ignore[list-item]
    with torch.no_grad(), ctx.tqdm(None, total=len(examples), desc="hidden states") as bar:
        for idx in length_batches([len(ex["input_ids"]) for ex in examples], BATCH_SIZE):
            ids, mask = padded_batch([examples[i] for i in idx], pad)
            out = bundle.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                               output_hidden_states=True)
            hs = torch.stack(out.hidden_states, 1)                 # (B, L+1, n, d)
            pos = torch.as_tensor([int(examples[i]["target_index"]) for i in idx], device=device)
            picked = hs[torch.arange(len(idx), device=device), :, pos].cpu().numpy()
            for k, i in enumerate(idx):
                feats[i] = picked[k]
            bar.update(len(idx))
    return np.stack(feats, axis=1)


def _probe_limit(ctx: Context) -> int | None:
    """Examples of the probe: ``probe_limit`` (None: the run's ``limit``; 0: all)."""
    limit = ctx.settings["probe_limit"] if ctx.settings["probe_limit"] is not None else ctx.limit
    return limit if limit and limit > 0 else None


#: The settings of vz-mdl-probing that are vz-cue-alignment's, passed on to it.
_ALIGNMENT_KEYS = ["condition", "methods", "exclude", "ties", "grad_score", "grad_aggregate", "ig_steps",
                   "ft_epochs", "ft_max_train_examples", "seed"]


def mdl_probing(ctx: Context) -> dict[str, pd.DataFrame]:
    """Compression (online-code MDL, :func:`cmixlib.metrics.probing.mdl_probe`, bits) of singular/plural from
    the [MASK] hidden state of layers 0..L (0 = embeddings), then Spearman's rho over layers 1..L
    between compression and each method's mean layer-wise cue alignment (``alignment_metric``; map
    of layer k paired with the output of layer k), the alignment coming from ``vz-cue-alignment``
    run with the same model, limit and settings (cached). ``probe_limit`` lets the probe use more
    examples than the alignment (None: the same ``limit``; 0: the whole test split). Frame
    ``compression_seeds``: the probe repeated at every layer with each of ``probe_seeds`` besides
    ``probe_seed`` (:func:`_compression_seeds`); ``compression`` and ``result`` are
    ``probe_seed``'s alone."""
    s = ctx.settings
    bundle, _, examples = ctx.load_inputs()
    ctx.info["data_size"] = {"probing": len(examples), "alignment": f"limit={ctx.limit}"}
    labels = np.array([1 if ex["label"] == "plural" else 0 for ex in examples])
    feats = _mask_states(bundle, examples, ctx)
    comp = mdl_by_layer(feats, labels, num_classes=2, blocks=s["blocks"],   # singular/plural
                        hidden=s["probe_hidden"], seed=s["probe_seed"])
    comp.insert(0, "condition", s["condition"])
    seeds = _compression_seeds(feats, labels, s, comp)
    align = run_experiment("vz-cue-alignment", ctx.model, ctx.limit, {k: s[k] for k in _ALIGNMENT_KEYS},
                           progress=ctx.progress, sources=ctx.sources).result
    ctx.note(f"alignment from vz-cue-alignment cache {align_key_note(align)}")
    a = align[align.metric == s["alignment_metric"]]
    c = comp.set_index("layer")["compression"]
    rows = []
    for m, g in a.groupby("method", sort=False):
        g = g.sort_values("layer")
        x = g["mean"].to_numpy()
        y = np.array([c[k + 1] for k in g["layer"]])
        rows.append({"condition": s["condition"], "method": m, "spearman": spearman(x, y),
                     "n_layers": len(x), "alignment_metric": s["alignment_metric"]})
    return {"result": pd.DataFrame(rows), "compression": comp, "compression_seeds": seeds}


def _compression_seeds(feats: np.ndarray, labels: np.ndarray, s: dict,
                       comp: pd.DataFrame) -> pd.DataFrame:
    """The compression of every layer under each probe seed: ``probe_seed`` (the values of
    ``comp``, not recomputed) and each of ``probe_seeds`` (the same probe and blocks; the seed
    sets the data order, the probe's initialisation and its batches). Columns condition, layer,
    seed, compression; the spread over seeds is the run-to-run noise of the MDL estimate."""
    parts = [comp[["condition", "layer", "compression"]].assign(seed=s["probe_seed"])]
    for seed in dict.fromkeys(s["probe_seeds"]):
        if seed == s["probe_seed"]:
            continue
        c = mdl_by_layer(feats, labels, num_classes=2, blocks=s["blocks"],
                         hidden=s["probe_hidden"], seed=seed)
        parts.append(c[["layer", "compression"]].assign(condition=s["condition"], seed=seed))
    return pd.concat(parts, ignore_index=True)[["condition", "layer", "seed", "compression"]]


def align_key_note(df: pd.DataFrame) -> str:
    return f"({df['method'].nunique()} methods, {df['layer'].nunique()} layers)"


MDL_PROBING = Experiment(
    name="vz-mdl-probing",
    title="MDL probing of number at [MASK] per layer, and its Spearman with cue alignment",
    paper="Value Zeroing (Figure 3, Table 2)", compute=mdl_probing,
    inputs=Inputs(MLM_ON_BLIMP.model, Data("blimp", limit=_probe_limit),
                  also="vz-cue-alignment's result (run, or read from the cache)"),
    defaults={"condition": "pretrained", "methods": VZ_LAYER_METHODS,
              "blocks": [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50, 100],
              "probe_hidden": 128, "probe_seed": 0, "probe_seeds": [1, 2, 3], "probe_limit": None, "alignment_metric": "dot",
              "exclude": "none", "ties": "optimistic", **_GRADIENTS, **FINETUNED_MLM_SETTINGS, "seed": 0},
    paper_numbers=pn.vz_table2,
    compare=lambda frames, paper: _compare_by_condition(
        frames["result"].rename(columns={"method": "cmix_method", "spearman": "mean"}), paper))


# ============================================================================================
# §7: faithfulness (Table 3)
# ============================================================================================
def faithfulness(ctx: Context) -> dict[str, pd.DataFrame]:
    """Per BLiMP test example: blank-out scores p(t|x) - p(t|x with token i -> [UNK]) (probability
    over target and foil only), and each method's global score for the [MASK] row (rollout of the
    layer maps; gradients w.r.t. the input word embeddings). Spearman per example over the positions
    left after ``exclude`` (default: [CLS], [SEP] and the target; blank-out also replaces the
    target itself, so its score is not 0 and is dropped), then mean ± std. The same scores are
    also correlated over the positions left by each mode in ``also_exclude`` (frame
    ``exclusion``: columns exclude, method, mean, std, n), so a sensitivity check needs no
    second run."""
    s = ctx.settings
    bundle, _, examples = ctx.load_inputs()
    blanked = batched(ctx, examples, lambda batch: blank_out_rows(bundle, batch, s["replacement"]),
                      desc=f"blank-out ({s['condition']})")
    modes = [s["exclude"], *[m for m in s["also_exclude"] if m != s["exclude"]]]
    rho: dict[str, dict[int, dict[str, float]]] = {mode: {} for mode in modes}
    for i, ex, sc in batched_rows(ctx, bundle, examples, level="input", desc=f"faithfulness ({s['condition']})"):
        bo = blanked[i]
        for mode in modes:
            excl = exclude_positions(ex, mode)
            rho[mode][i] = spearman_to(bo, sc, exclude=excl)
    tables = {mode: correlation_table({m: [r[i][m] for i in sorted(r)] for m in s["methods"]},
                                         condition=s["condition"])
              for mode, r in rho.items()}
    exclusion = pd.concat([t.assign(exclude=mode) for mode, t in tables.items()], ignore_index=True)
    return {"result": tables[s["exclude"]], "exclusion": exclusion}


FAITHFULNESS = Experiment(
    name="vz-faithfulness", title="Spearman of aggregated scores with blank-out at [MASK]",
    paper="Value Zeroing (Table 3)", inputs=MLM_ON_BLIMP, compute=faithfulness,
    defaults={"condition": "pretrained", "methods": [*VZ_GLOBAL_METHODS, "nearness"],
              "replacement": "unk",
              "exclude": "special+target", "also_exclude": ["target"], **_GRADIENTS, **FINETUNED_MLM_SETTINGS, "seed": 0},
    paper_numbers=pn.vz_table3,
    compare=lambda frames, paper: _compare_by_condition(
        frames["result"].rename(columns={"method": "cmix_method"}), paper))
