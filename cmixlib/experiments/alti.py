"""The ALTI paper's experiments (Ferrando et al. 2022): the normalised rank of special tokens
(Figure 6), agreement with gradient and blank-out references on SST-2 and SVA (Table 2), the
consistency of attributions across two models (Figure 7). Figure 3 (anisotropy):
:mod:`cmixlib.experiments.alti_anisotropy`; Figures 8-10: :mod:`cmixlib.experiments.alti_layers`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from cmixlib.metrics import evaluation as ev
from cmixlib.metrics.statistics import (correlation_table, mean_ci, per_example_spearman,
                                        spearman_to)
from cmixlib.data import paper_numbers as pn
from cmixlib.models.arch import num_layers
from cmixlib.forward.batching import length_batches
from cmixlib.experiments.common import (GRADIENT_METHODS, batched, blank_out_rows, cls_rows_batch,
                                        comparison_table, describe, pad_id, padded_batch,
                                        predicted_classes, target_rows_batch)
from cmixlib.experiments.controls import CONTROLS, control_scores, control_seed
from cmixlib.experiments.declaration import Experiment
from cmixlib.experiments.runner import Context
from cmixlib.experiments.sources import (CLASSIFIER_SETTINGS, SST2_CLASSIFIER, Data, Inputs, Model,
                                         ModelByCondition)
from cmixlib.gradients import ClassTarget, GRADIENT_METHODS as ATTRIBUTION_METHODS, batch_attribute
from cmixlib.methods import dispatch as core

__all__ = ["FIG6_SPECIAL_RANKS", "TABLE2", "TABLE2_TASKS", "FIG7_CONSISTENCY", "FIG7_METHODS",
           "DEPTH_METHODS", "DEPTH_REFERENCE", "describe_ig_check"]

# ============================================================================================
# Figure 6: normalised rank of special tokens
# ============================================================================================
def fig6_special_ranks(ctx: Context) -> dict[str, pd.DataFrame]:
    """For each SST-2 test sentence (the first ``limit``, as ALTI's code), the final-layer [CLS] row of each method is turned into normalised
    dense ranks and the ranks of [CLS], [SEP], "." and "," are averaged; then the mean over sentences.
    ``condition="finetuned"`` reads the SST-2 classifier (:meth:`Sources.classifier`); ``"pretrained"`` uses
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
    return {"result": correlation_table(per)}


FIG6_SPECIAL_RANKS = Experiment(
    name="alti-fig6-special-ranks", title="Mean normalised rank of [CLS]/[SEP]/./, on SST-2",
    paper="ALTI (Figure 6)", compute=fig6_special_ranks,
    inputs=Inputs(ModelByCondition({"finetuned": SST2_CLASSIFIER, "pretrained": Model("base")}),
                  Data("sst2_test")),
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
    rows = target_rows_batch(bundle, batch, methods, {}, level="input", seeds=[0] * len(batch))
    return list(zip(blank_out_rows(bundle, batch, settings["blankout_replacement"]), rows))


#: Table 2's tasks: label, model and examples, and the reference each method is correlated with.
TABLE2_TASKS = {
    "sst2": {"label": "SST-2", "inputs": Inputs(SST2_CLASSIFIER, Data("sst2_test")), "reference": _grad_reference},
    "sva": {"label": "SVA", "inputs": Inputs(Model("mlm", "pretrained"), Data("sva")),
            "reference": _blankout_reference},
}


def table2(ctx: Context) -> dict[str, pd.DataFrame]:
    """SST-2 (the first ``limit`` test sentences, as ALTI's code; the classifier of
    :meth:`Sources.classifier`): Spearman between the
    final-layer [CLS] row of each method and grad-l2 of the predicted class probability w.r.t. the
    word embeddings. SVA (Linzen data, pre-trained MLM, ``limit`` or 500 random sentences): Spearman
    between the [MASK] row and blank-out (token -> ``blankout_replacement``, probability of the
    correct verb over {correct, wrong}). [CLS]/[SEP] included unless ``include_special`` is False;
    frame ``special`` has both variants (column ``special``: "kept"/"dropped") from the same scores.
    The sanity baselines ``controls`` (:func:`cmixlib.experiments.controls.control_scores`:
    random, seeded per example with ``seed``; nearness to the [CLS] or [MASK]) are correlated
    with the same references and reported as methods. Frame ``per_example``: each sentence's
    Spearman per task and method (the chosen ``include_special`` variant), in the data's order."""
    s = ctx.settings
    methods = list(s["methods"])
    tables, per_example = [], []
    for task in s["tasks"]:
        if task not in TABLE2_TASKS:
            raise ValueError(f"unknown task {task!r}")
        spec = TABLE2_TASKS[task]
        bundle, _, examples = ctx.load_inputs(task)
        pairs = batched(ctx, examples, lambda batch: spec["reference"](bundle, batch, methods, s),
                        desc=f"ALTI Table 2 ({task})")
        names = methods + list(s["controls"])
        per: dict[bool, dict[str, list[float]]] = {keep: {m: [] for m in names} for keep in (True, False)}
        for i in range(len(examples)):
            ref, sc = pairs[i]
            t = int(examples[i].get("target_index", 0))           # SST-2: [CLS]
            sc = {**sc, **control_scores(len(ref), t, control_seed(s["seed"], i), s["controls"])}
            for keep in (True, False):
                for m, rho in spearman_to(ref, sc, exclude=None if keep else [0, -1]).items():
                    per[keep][m].append(rho)
        tables += [correlation_table(per[keep], task=spec["label"], special="kept" if keep else "dropped")
                   for keep in (True, False)]
        kept = per[bool(s["include_special"])]
        per_example += [{"task": spec["label"], "example": i, "method": m, "rho": kept[m][i]}
                        for m in names for i in range(len(examples))]
    both = pd.concat(tables, ignore_index=True)
    chosen = both[both["special"] == ("kept" if s["include_special"] else "dropped")]
    return {"result": chosen.drop(columns="special").reset_index(drop=True), "special": both,
            "per_example": pd.DataFrame(per_example, columns=["task", "example", "method", "rho"])}


TABLE2 = Experiment(
    name="alti-table2",
    title="Spearman of final-layer relevance with grad-l2 (SST-2) and blank-out (SVA)",
    paper="ALTI (Table 2)", compute=table2,
    inputs={task: spec["inputs"] for task, spec in TABLE2_TASKS.items()},
    defaults={"tasks": ["sst2", "sva"], "methods": ["attention", "attention_rollout",
                                                    "rollout:attn_norm_res_ln", "alti"],
              "include_special": True, "blankout_replacement": "mask", "controls": list(CONTROLS),
              "seed": 0, **CLASSIFIER_SETTINGS},
    paper_numbers=lambda: pd.concat([pn.alti_table2(), pn.alti_repo_correlations()], ignore_index=True),
    compare=lambda frames, paper: comparison_table(
        frames["result"].rename(columns={"method": "cmix_method"}), paper, ["cmix_method", "task"]))


# ============================================================================================
# Figure 7: consistency across two models
# ============================================================================================
#: ALTI Figure 7's methods: ALTI ([CLS] row, last layer) and three input-level gradient methods,
#: aggregated as in ALTI's Appendix B (grad-l2: ``||g||``; gradient·input: ``|g·x|``; IG: ``|sum_d ...|``).
FIG7_METHODS = ["alti", "grad_l2", "grad_x_input_abs", "integrated_gradients"]


#: Frame ``table2_by_depth`` of Figure 7: Table 2's SST-2 column on each of the two models, for
#: these methods' final-layer [CLS] rows and Table 2's sanity baselines, against this reference.
DEPTH_METHODS = ["attention_rollout", "alti"]
DEPTH_REFERENCE = "grad_l2"


#: Sentences per padded batch in Figure 7 (IG expands each to ``ig_steps`` rows, so the batch
#: stays small); the vectors equal one-sentence runs up to float rounding (padding is masked).
FIG7_BATCH = 8


def _fig7_vectors(bundle, batch: list[dict], classes: list[int], methods: list[str],
                  s) -> list[dict[str, np.ndarray]]:
    """For each sentence of a padded batch, final-layer [CLS] rows of context-mixing methods and
    input-level gradient attributions of the probability of its class in ``classes`` (ALTI's
    convention: the predicted class)."""
    ids, mask = padded_batch(batch, pad_id(bundle.tokenizer))
    lengths = [len(ex["input_ids"]) for ex in batch]
    out: list[dict[str, np.ndarray]] = [{} for _ in batch]
    cm = [m for m in methods if m in core.METHODS]
    if cm:
        maps = core.context_mixing(bundle.model, bundle.tokenizer,
                                   {"input_ids": ids, "attention_mask": mask}, methods=cm,
                                   final_rows=0)
        maps = maps if isinstance(maps, list) else [maps]
        for b in range(len(batch)):
            out[b].update({m: maps[b][m][-1, 0] for m in cm})
    grads = [m for m in methods if m in ATTRIBUTION_METHODS]
    if grads:
        # one call: the plain-gradient methods share a pass; "abs" applies to IG / DeepLift only
        res = batch_attribute(bundle.model, ids, [ClassTarget(int(c), score="prob") for c in classes],
                              grads, "input", attention_mask=mask, aggregate="abs",
                              baseline="mask", tokenizer=bundle.tokenizer,
                              n_steps=int(s["ig_steps"]))
        for b, n in enumerate(lengths):
            out[b].update({m: res[m][b][:n] for m in grads})
    return out


def _ig_step_check(bundle_a, bundle_b, ex: dict, cls: int, xa: dict, xb: dict, s,
                   excl) -> dict[str, float]:
    """IG of both models once more with ``ig_check_steps`` steps on one sentence: the Spearman
    between each model's two IG vectors, and the consistency rho(A, B) with either step count."""
    ref = dict(s, ig_steps=int(s["ig_check_steps"]))
    ra, rb = (_fig7_vectors(b, [ex], [cls], ["integrated_gradients"], ref)[0]["integrated_gradients"]
              for b in (bundle_a, bundle_b))
    ig = "integrated_gradients"
    rho = lambda u, v: per_example_spearman([u], [v], exclude=excl)[0]  # noqa: E731
    return {"A": rho(xa[ig], ra), "B": rho(xb[ig], rb),
            "consistency": rho(xa[ig], xb[ig]), "consistency_ref": rho(ra, rb)}


def _ig_check_table(rows: list[dict], s) -> pd.DataFrame:
    """The ``ig_check`` frame: per quantity, mean and minimum over the checked sentences."""
    df = pd.DataFrame(rows)
    steps, ref = int(s["ig_steps"]), int(s["ig_check_steps"])
    what = {"A": f"model A: Spearman of IG at {steps} vs {ref} steps",
            "B": f"model B: Spearman of IG at {steps} vs {ref} steps",
            "consistency": f"rho(A, B) of IG at {steps} steps",
            "consistency_ref": f"rho(A, B) of IG at {ref} steps"}
    return pd.DataFrame([{"quantity": k, "description": what[k], "mean": float(df[k].mean()),
                          "min": float(df[k].min()), "n": len(df), "steps": steps,
                          "reference_steps": ref} for k in what])


def describe_ig_check(frame: pd.DataFrame) -> str:
    """A sentence from Figure 7's ``ig_check`` frame. Rule: it prints the two step counts, the
    number of sentences, the mean (and minimum) Spearman of each model's IG vectors at the two
    step counts, and rho(A, B) of IG's consistency with either; no judgement is added."""
    c = frame.set_index("quantity")
    steps, ref, n = (int(c["steps"].iloc[0]), int(c["reference_steps"].iloc[0]),
                     int(c["n"].iloc[0]))
    model = lambda k: f"{c.loc[k, 'mean']:.4f} (min {c.loc[k, 'min']:.4f})"  # noqa: E731
    return (f"IG runs with {steps} Gauss-Legendre steps; on the first {n} compared sentences it "
            f"was also run with {ref}: Spearman between the two IG vectors, model A "
            f"{model('A')}, model B {model('B')}; IG's consistency rho(A, B) there is "
            f"{c.loc['consistency', 'mean']:.3f} at {steps} steps and "
            f"{c.loc['consistency_ref', 'mean']:.3f} at {ref}.")


def _table2_by_depth(vectors: dict[int, tuple[dict, dict]], same: list[int],
                     layers: list[tuple[str, int]], s, excl) -> pd.DataFrame:
    """Frame ``table2_by_depth``: for each model (role, layers) in ``layers`` (the order of the
    pairs in ``vectors``), Table 2's SST-2 column over the sentences ``same``: the Spearman per
    sentence between :data:`DEPTH_REFERENCE` (grad-L2 of the probability of the class both models
    predict there: each model's own prediction, as Table 2's) and each
    of :data:`DEPTH_METHODS` and the controls (:func:`control_scores`, target 0, seeded per
    sentence with ``control_seed(seed, k)``, k the sentence's index in the run's data, as
    Table 2's), aggregated by :func:`correlation_table`."""
    tables = []
    for r, (role, n_layers) in enumerate(layers):
        per: dict[str, list[float]] = {m: [] for m in [*DEPTH_METHODS, *CONTROLS]}
        for k in same:
            x = vectors[k][r]
            ref = x[DEPTH_REFERENCE]
            sc = {**{m: x[m] for m in DEPTH_METHODS},
                  **control_scores(len(ref), 0, control_seed(s["seed"], k), CONTROLS)}
            for m, rho in spearman_to(ref, sc, exclude=excl).items():
                per[m].append(rho)
        tables.append(correlation_table(per, model=role, layers=int(n_layers),
                                        reference=DEPTH_REFERENCE))
    return pd.concat(tables, ignore_index=True)


def fig7_consistency(ctx: Context) -> dict[str, pd.DataFrame]:
    """ALTI Figure 7: two SST-2 classifiers that share a tokenizer (model A = ``--model``, fine-tuned
    by :meth:`Sources.classifier`; model B from ``model_b``, see :meth:`Sources.model_b
    <cmixlib.experiments.sources.Sources.model_b>`) explain each SST-2 test sentence (the first ``limit``) on which they
    predict the same class c. Per method, the attribution vectors of the two models (ALTI:
    final-layer [CLS] row of the rollout; gradients w.r.t. the input word embeddings of p_c:
    grad-l2 ||g_j||, gradient·input |g_j·x_j|, IG with a [MASK] baseline and ``ig_steps`` steps,
    |sum_d|) are compared with Spearman's rho over all positions ([CLS]/[SEP] included unless
    ``include_special`` is False); mean over sentences with a t interval. The paper prints no numbers
    (bars only): "our method is the most consistent ..., with grad_l2 following behind".
    With ``ig_check`` > 0, the first ``ig_check`` compared sentences also get IG with
    ``ig_check_steps`` steps (the authors' code: 100): frame ``ig_check`` gives the Spearman of
    each model's IG vectors at the two step counts and rho(A, B) of IG with either (mean, min).
    Frame ``table2_by_depth`` (``_table2_by_depth``): on the same sentences, Table 2's SST-2
    column (Spearman with grad-L2; [CLS]/[SEP] as ``include_special``, default kept as Table 2's
    default) for each model, attention rollout and ALTI beside Random and Nearness (seeded with
    ``seed``): does Attn Rollout do better on the shallower model? The ALTI and grad-L2 rows are
    the ones compared across models; the rollout row comes from the same forward pass."""
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
    ctx.describe_models([("A", bundle_a, info_a), ("B", bundle_b, info_b)])
    ctx.note(f"model B: {how}")
    per: dict[str, list[float]] = {m: [] for m in methods}
    per_rows, check_rows = [], []
    # the rows table2_by_depth needs beside the compared methods (by default: the rollout only)
    computed = methods + [m for m in [*DEPTH_METHODS, DEPTH_REFERENCE] if m not in methods]
    excl = None if s["include_special"] else [0, -1]
    pred = {role: batched(ctx, examples, lambda batch, b=b: predicted_classes(b, batch).tolist(),
                          desc=f"predictions of model {role}")
            for role, b in (("A", bundle_a), ("B", bundle_b))}
    correct = {role: sum(int(p[k] == int(ex["label"])) for k, ex in enumerate(examples)
                         if ex.get("label") is not None)      # the test split is unlabelled
               for role, p in pred.items()}
    same = [k for k in range(len(examples)) if pred["A"][k] == pred["B"][k]]
    agree = len(same)
    vectors: dict[int, tuple[dict, dict]] = {}
    with ctx.tqdm(None, total=agree, desc="ALTI Figure 7") as bar:
        for idx in length_batches([len(examples[k]["input_ids"]) for k in same], FIG7_BATCH):
            ks = [same[i] for i in idx]
            batch, classes = [examples[k] for k in ks], [int(pred["A"][k]) for k in ks]
            va = _fig7_vectors(bundle_a, batch, classes, computed, s)
            vb = _fig7_vectors(bundle_b, batch, classes, computed, s)
            vectors.update(zip(ks, zip(va, vb)))
            bar.update(len(ks))
    for j, k in enumerate(same):                  # the sentences in their order
        ex, ca = examples[k], int(pred["A"][k])
        xa, xb = vectors[k]
        if j < int(s["ig_check"]) and "integrated_gradients" in methods:
            check_rows.append(_ig_step_check(bundle_a, bundle_b, ex, ca, xa, xb, s, excl))
        for m in methods:
            rho = per_example_spearman([xa[m]], [xb[m]], exclude=excl)[0]
            per[m].append(rho)
            per_rows.append({"example": k, "n_tokens": len(ex["input_ids"]), "predicted": ca, "method": m,
                             "spearman": rho})
    n = len(examples)
    labelled = all(ex.get("label") is not None for ex in examples)
    result = pd.DataFrame([{"method": m, **mean_ci(v, s["confidence"])} for m, v in per.items()])
    models = pd.DataFrame([
        {"model": role, "description": describe(b), "layers": num_layers(b.model),
         "dev_accuracy": (i or {}).get("accuracy"), "sample_accuracy": (correct[role] / max(1, n) if labelled else None), "n": n}
        for role, b, i in (("A", bundle_a, info_a), ("B", bundle_b, info_b))])
    agreement = pd.DataFrame([{"n_sentences": n, "n_same_prediction": agree,
                               "agreement_rate": agree / max(1, n)}])
    ctx.info["model_b"] = how
    frames = {"result": result, "models": models, "agreement": agreement,
              "per_example": pd.DataFrame(per_rows, columns=["example", "n_tokens", "predicted", "method", "spearman"]),
              "table2_by_depth": _table2_by_depth(vectors, same, list(zip(models["model"], models["layers"])),
                                                  s, excl)}
    if check_rows:
        frames["ig_check"] = _ig_check_table(check_rows, s)
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
    if "table2_by_depth" in frames:
        text += ("\n\nTable 2's SST-2 column (Spearman with grad-L2) on each model, same sentences:\n"
                 + frames["table2_by_depth"].to_string(index=False, float_format=fmt))
    return text


FIG7_CONSISTENCY = Experiment(
    name="alti-fig7-consistency",
    title="Spearman between two models' attributions where both predict the same class (SST-2)",
    paper="ALTI (Figure 7)", compute=fig7_consistency,
    inputs=Inputs(SST2_CLASSIFIER, Data("sst2_test"), also="model B (Sources.model_b, setting model_b)"),
    defaults={"methods": FIG7_METHODS, "model_b": "auto", "keep_layers": None, "ig_steps": 100,
              "ig_check": 0, "ig_check_steps": 100,
              "include_special": True, "confidence": 0.95, "seed": 0, **CLASSIFIER_SETTINGS,
              "b_cls_epochs": None, "b_cls_max_train_examples": 6000},
    summary=_fig7_summary)
