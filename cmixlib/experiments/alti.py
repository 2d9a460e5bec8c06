"""The ALTI paper's experiments (Ferrando et al. 2022): the normalised rank of special tokens
(Figure 6), agreement with gradient and blank-out references on SST-2 and SVA (Table 2) and the
consistency of attributions across two models (Figure 7)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import evaluation as ev
from .. import paper_numbers as pn
from ..arch import num_layers
from .common import (GRADIENT_METHODS, batched, cls_rows_batch, comparison_table, describe,
                     ids_tensor, mean_ci, predicted_class, target_rows_batch)
from .runner import Context, Experiment
from .sources import CLASSIFIER_SETTINGS, SST2_CLASSIFIER, Data, Inputs, Model, ModelByCondition

__all__ = ["FIG6_SPECIAL_RANKS", "TABLE2", "TABLE2_TASKS", "FIG7_CONSISTENCY", "FIG7_METHODS"]

# ============================================================================================
# Figure 6: normalised rank of special tokens
# ============================================================================================
def fig6_special_ranks(ctx: Context) -> dict[str, pd.DataFrame]:
    """For each SST-2 dev sentence, the final-layer [CLS] row of each method is turned into normalised
    dense ranks and the ranks of [CLS], [SEP], "." and "," are averaged; then the mean over sentences.
    ``condition="finetuned"`` trains an SST-2 classifier (cmixlib.training); ``"pretrained"`` uses
    the bare encoder (no gradient method then). Paper numbers: the ALTI repository's values."""
    s = ctx.settings
    bundle, _, examples = ctx.load_inputs()
    methods = list(s["methods"])
    if s["condition"] != "finetuned" and "grad_l2" in methods:
        methods = [m for m in methods if m not in GRADIENT_METHODS]
        ctx.note("gradient methods skipped: the pre-trained encoder has no classification head")
    vectors = batched(ctx, examples, lambda batch: cls_rows_batch(bundle, batch, methods), desc="sentences")
    per: dict[str, list[float]] = {m: [] for m in methods}
    for i, ex in enumerate(examples):
        for m in methods:
            per[m].append(ev.special_token_rank(vectors[i][m], ex["tokens"], scheme=s["rank_scheme"]))
    return {"result": ev.correlation_table(per)}


FIG6_SPECIAL_RANKS = Experiment(
    name="alti-fig6-special-ranks", title="Mean normalised rank of [CLS]/[SEP]/./, on SST-2",
    paper="ALTI (Figure 6)", compute=fig6_special_ranks,
    inputs=Inputs(ModelByCondition({"finetuned": SST2_CLASSIFIER, "pretrained": Model("base")}),
                  Data("sst2")),
    defaults={"condition": "finetuned", "methods": ["attention", "attention_rollout",
                                                    "rollout:attn_norm_res_ln", "alti", "grad_l2"],
              "rank_scheme": "dense", **CLASSIFIER_SETTINGS},
    paper_numbers=pn.alti_repo_special_token_ranks,
    compare=lambda frames, paper: comparison_table(
        frames["result"].rename(columns={"method": "cmix_method"}), paper, ["cmix_method"]))


# ============================================================================================
# Table 2
# ============================================================================================
def _grad_reference(bundle, batch, methods, settings):
    """SST-2: grad-L2 of the predicted class probability, beside the [CLS] rows."""
    rows = cls_rows_batch(bundle, batch, methods + ["grad_l2"])
    return [(r.pop("grad_l2"), {m: r[m] for m in methods}) for r in rows]


def _blankout_reference(bundle, batch, methods, settings):
    """SVA: blank-out at [MASK] (probability of the correct verb over both), beside the [MASK] rows."""
    from ..gradients import MLMTarget, blank_out

    rows = target_rows_batch(bundle, batch, methods, {}, level="input", seeds=[0] * len(batch))
    refs = [blank_out(bundle.model, ids_tensor(ex),
                      MLMTarget(int(ex["target_index"]), int(ex["target_id"]), int(ex["foil_id"])),
                      replacement=settings["blankout_replacement"], tokenizer=bundle.tokenizer,
                      skip_special=False)
            for ex in batch]
    return list(zip(refs, rows))


#: Table 2's tasks: label, model and examples, and the reference each method is correlated with.
TABLE2_TASKS = {
    "sst2": {"label": "SST-2", "inputs": Inputs(SST2_CLASSIFIER, Data("sst2")), "reference": _grad_reference},
    "sva": {"label": "SVA", "inputs": Inputs(Model("mlm", "pretrained"), Data("sva")),
            "reference": _blankout_reference},
}


def table2(ctx: Context) -> dict[str, pd.DataFrame]:
    """SST-2 (dev split, a classifier fine-tuned by cmixlib.training): Spearman between the
    final-layer [CLS] row of each method and grad-l2 of the predicted class probability w.r.t. the
    word embeddings. SVA (Linzen data, pre-trained MLM, ``limit`` or 500 random sentences): Spearman
    between the [MASK] row and blank-out (token -> ``blankout_replacement``, probability of the
    correct verb over {correct, wrong}). [CLS]/[SEP] included unless ``include_special`` is False;
    frame ``special`` has both variants (column ``special``: "kept"/"dropped") from the same scores."""
    s = ctx.settings
    methods = list(s["methods"])
    tables = []
    for task in s["tasks"]:
        if task not in TABLE2_TASKS:
            raise ValueError(f"unknown task {task!r}")
        spec = TABLE2_TASKS[task]
        bundle, _, examples = ctx.load_inputs(task)
        pairs = batched(ctx, examples, lambda batch: spec["reference"](bundle, batch, methods, s),
                        desc=f"ALTI Table 2 ({task})")
        per: dict[bool, dict[str, list[float]]] = {keep: {m: [] for m in methods} for keep in (True, False)}
        for i in range(len(examples)):
            ref, sc = pairs[i]
            for keep in (True, False):
                excl = None if keep else [0, -1]
                for m, v in sc.items():
                    per[keep][m].append(ev.per_example_spearman([v], [ref], exclude=excl)[0])
        tables += [ev.correlation_table(per[keep], task=spec["label"], special="kept" if keep else "dropped")
                   for keep in (True, False)]
    both = pd.concat(tables, ignore_index=True)
    chosen = both[both["special"] == ("kept" if s["include_special"] else "dropped")]
    return {"result": chosen.drop(columns="special").reset_index(drop=True), "special": both}


TABLE2 = Experiment(
    name="alti-table2",
    title="Spearman of final-layer relevance with grad-l2 (SST-2) and blank-out (SVA)",
    paper="ALTI (Table 2)", compute=table2,
    inputs={task: spec["inputs"] for task, spec in TABLE2_TASKS.items()},
    defaults={"tasks": ["sst2", "sva"], "methods": ["attention", "attention_rollout",
                                                    "rollout:attn_norm_res_ln", "alti"],
              "include_special": True, "blankout_replacement": "mask", **CLASSIFIER_SETTINGS},
    paper_numbers=lambda: pd.concat([pn.alti_table2(), pn.alti_repo_correlations()], ignore_index=True),
    compare=lambda frames, paper: comparison_table(
        frames["result"].rename(columns={"method": "cmix_method"}), paper, ["cmix_method", "task"]))


# ============================================================================================
# Figure 7: consistency across two models
# ============================================================================================
#: ALTI Figure 7's methods: ALTI ([CLS] row, last layer) and three input-level gradient methods,
#: aggregated as in ALTI's Appendix B (grad-l2: ||g||; gradient·input: |g·x|; IG: |sum_d ...|).
FIG7_METHODS = ["alti", "grad_l2", "grad_x_input_abs", "integrated_gradients"]


def _fig7_vectors(bundle, ids, cls: int, methods: list[str], s) -> dict[str, np.ndarray]:
    """Final-layer [CLS] rows of context-mixing methods and input-level gradient attributions of
    the predicted-class probability (ALTI's convention) for one sentence."""
    from .. import core
    from ..gradients import GRADIENT_METHODS as ATTRIBUTION_METHODS, ClassTarget, batch_attribute

    out: dict[str, np.ndarray] = {}
    cm = [m for m in methods if m in core.METHODS]
    if cm:
        maps = core.context_mixing(bundle.model, bundle.tokenizer, {"input_ids": ids}, methods=cm)
        for m in cm:
            out[m] = maps[m][-1, 0]
    grads = [m for m in methods if m in ATTRIBUTION_METHODS]
    if grads:
        # one call: the plain-gradient methods share a pass; "abs" applies to IG / DeepLift only
        res = batch_attribute(bundle.model, ids, [ClassTarget(cls, score="prob")], grads, "input",
                              aggregate="abs", baseline="mask", tokenizer=bundle.tokenizer, n_steps=int(s["ig_steps"]))
        out.update({m: res[m][0] for m in grads})
    return out


def fig7_consistency(ctx: Context) -> dict[str, pd.DataFrame]:
    """ALTI Figure 7: two SST-2 classifiers that share a tokenizer (model A = ``--model``, fine-tuned
    by cmixlib.training; model B from ``model_b``, see :meth:`Sources.model_b
    <cmixlib.experiments.sources.Sources.model_b>`) explain each SST-2 dev sentence on which they
    predict the same class c. Per method, the attribution vectors of the two models (ALTI:
    final-layer [CLS] row of the rollout; gradients w.r.t. the input word embeddings of p_c:
    grad-l2 ||g_j||, gradient·input |g_j·x_j|, IG with a [MASK] baseline and ``ig_steps`` steps,
    |sum_d|) are compared with Spearman's rho over all positions ([CLS]/[SEP] included unless
    ``include_special`` is False); mean over sentences with a t interval. The paper prints no numbers
    (bars only): "our method is the most consistent ..., with grad_l2 following behind"."""
    from .. import core
    from ..gradients import GRADIENT_METHODS as ATTRIBUTION_METHODS

    s = ctx.settings
    methods = list(s["methods"])
    bad = [m for m in methods if m not in core.METHODS and m not in ATTRIBUTION_METHODS]
    if bad:
        raise ValueError(f"alti-fig7-consistency: unknown method(s) {bad}; use context-mixing methods "
                         f"{sorted(core.METHODS)} or gradient methods {list(ATTRIBUTION_METHODS)}")
    bundle_a, info_a, examples = ctx.load_inputs()
    bundle_b, info_b, how = ctx.sources.model_b(bundle_a)
    va, vb = (getattr(b.tokenizer, "get_vocab", None) for b in (bundle_a, bundle_b))
    if bundle_a.tokenizer is not bundle_b.tokenizer and va is not None and vb is not None and va() != vb():
        raise ValueError("ALTI Figure 7 compares per-token vectors: model B must share model A's tokenizer.")
    ctx.info["model_description"] = f"A: {describe(bundle_a, info_a)} | B: {describe(bundle_b, info_b)}"
    ctx.note(f"model B: {how}")
    per: dict[str, list[float]] = {m: [] for m in methods}
    per_rows, correct, agree = [], {"A": 0, "B": 0}, 0
    excl = None if s["include_special"] else [0, -1]
    for k, ex in enumerate(ctx.tqdm(examples, desc="ALTI Figure 7")):
        ids = ids_tensor(ex)
        ca, cb = predicted_class(bundle_a.model, ids), predicted_class(bundle_b.model, ids)
        correct["A"] += int(ca == int(ex["label"]))
        correct["B"] += int(cb == int(ex["label"]))
        if ca != cb:
            continue
        agree += 1
        xa = _fig7_vectors(bundle_a, ids, ca, methods, s)
        xb = _fig7_vectors(bundle_b, ids, cb, methods, s)
        for m in methods:
            rho = ev.per_example_spearman([xa[m]], [xb[m]], exclude=excl)[0]
            per[m].append(rho)
            per_rows.append({"example": k, "n_tokens": len(ex["input_ids"]), "predicted": ca, "method": m,
                             "spearman": rho})
    n = len(examples)
    result = pd.DataFrame([{"method": m, **mean_ci(v, s["confidence"])} for m, v in per.items()])
    models = pd.DataFrame([
        {"model": role, "description": describe(b), "layers": num_layers(b.model),
         "dev_accuracy": (i or {}).get("accuracy"), "sample_accuracy": correct[role] / max(1, n), "n": n}
        for role, b, i in (("A", bundle_a, info_a), ("B", bundle_b, info_b))])
    agreement = pd.DataFrame([{"n_sentences": n, "n_same_prediction": agree,
                               "agreement_rate": agree / max(1, n)}])
    ctx.info["model_b"] = how
    frames = {"result": result, "models": models, "agreement": agreement,
              "per_example": pd.DataFrame(per_rows, columns=["example", "n_tokens", "predicted", "method", "spearman"])}
    if "alti" in methods:   # paired over the same sentences: rho(method) - rho(ALTI), the paper's claim is < 0
        ref = np.asarray(per["alti"], dtype=float)
        frames["vs_alti"] = pd.DataFrame([
            {"method": m, "reference": "alti", **mean_ci(np.asarray(per[m], dtype=float) - ref, s["confidence"])}
            for m in methods if m != "alti"]).rename(columns={"mean": "mean_diff", "std": "std_diff"})
    return frames


def _fig7_summary(frames) -> str:
    fmt = lambda v: f"{v:.3f}"  # noqa: E731
    text = ("models:\n" + frames["models"].to_string(index=False) + "\n\nagreement:\n"
            + frames["agreement"].to_string(index=False) + "\n\nSpearman between the two models' vectors "
            "(samples where both predict the same class):\n" + frames["result"].to_string(index=False, float_format=fmt))
    if "vs_alti" in frames:
        text += ("\n\npaired difference rho(method) - rho(ALTI) over the same sentences:\n"
                 + frames["vs_alti"].to_string(index=False, float_format=fmt))
    return text


FIG7_CONSISTENCY = Experiment(
    name="alti-fig7-consistency",
    title="Spearman between two models' attributions where both predict the same class (SST-2)",
    paper="ALTI (Figure 7)", compute=fig7_consistency,
    inputs=Inputs(SST2_CLASSIFIER, Data("sst2"), also="model B (Sources.model_b, setting model_b)"),
    defaults={"methods": FIG7_METHODS, "model_b": "auto", "keep_layers": None, "ig_steps": 100,
              "include_special": True, "confidence": 0.95, **CLASSIFIER_SETTINGS,
              "b_cls_epochs": None, "b_cls_max_train_examples": 6000},
    summary=_fig7_summary)
