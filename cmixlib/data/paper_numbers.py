"""Published numbers, transcribed from the papers' tables: **quotes, not our results**.

Every function returns a tidy :class:`pandas.DataFrame` with one row per number and the columns

``paper, table, model, condition, task, method, cmix_method, metric, value, std, source``

* ``paper``: ``"Value Zeroing"`` (Mohebbi et al., EACL 2023), ``"ALTI"`` (Ferrando et al.,
  EMNLP 2022) or ``"GlobEnc"`` (Modarressi et al., NAACL 2022);
* ``table``: where the number is printed (or, for the ALTI repository values, where it was read);
* ``method``: the label as printed; ``cmix_method``: the matching name in
  :func:`cmixlib.context_mixing` / :mod:`cmixlib.gradients` (rolled-out variants are named by the
  aggregated map, see each function);
* ``std``: the printed standard deviation over examples where the paper gives one, else NaN;
* ``source``: a human-readable citation of the exact place.

Transcribed from the paper texts (the project's seed copies of the three papers: 000 = Value Zeroing, 001 = ALTI,
004 = GlobEnc) and from the ALTI repository's committed result files (book/reference_code.md §6
names them). Each
number was checked against the seed text by a second read (see ``tests`` for spot checks).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["VZ_MLM_ACCURACY", "vz_table2", "vz_table3", "alti_table2", "alti_repo_correlations",
           "alti_repo_special_token_ranks", "alti_repo_anisotropy", "globenc_table1", "globenc_table2",
           "all_numbers", "COLUMNS"]

COLUMNS = ["paper", "table", "model", "condition", "task", "method", "cmix_method", "metric",
           "value", "std", "source"]

VZ = "Value Zeroing"
VZ_SRC = "Mohebbi et al. (2023), Quantifying Context Mixing in Transformers, EACL"
#: BLiMP agreement accuracy of the paper's BERT-base on the test half (§4.2, Training setup).
VZ_MLM_ACCURACY = {"pretrained": 0.96, "finetuned": 0.99}
#: Shape of the papers' models (Devlin et al. 2019 for BERT): layers, hidden size, heads.
PAPER_MODEL_SHAPES = {"bert-base-uncased": {"layers": 12, "hidden": 768, "heads": 12},
                      "bert-large-uncased": {"layers": 24, "hidden": 1024, "heads": 16}}
ALTI = "ALTI"
ALTI_SRC = "Ferrando et al. (2022), Measuring the Mixing of Contextual Information in the Transformer, EMNLP"
GE = "GlobEnc"
GE_SRC = "Modarressi et al. (2022), GlobEnc, NAACL"

# Value Zeroing labels -> cmixlib names. Table 2 is layer-wise (no rollout; GlobEnc/ALTI with the
# "not rolled out" arrow); Table 3 is aggregated (rollout, or gradients w.r.t. the input embeddings).
_VZ_T2_MAP = {
    "Rand": "random", "Attn": "attention", "Attn-norm": "attn_norm", "Attn-norm + RES": "attn_norm_res",
    "Attn-norm + RES + LN": "attn_norm_res_ln", "GlobEnc (no rollout)": "globenc_layer",
    "ALTI (no rollout)": "alti_layer", "GradXinput": "grad_x_input", "IG": "integrated_gradients",
    "DL": "deeplift", "Value Zeroing": "value_zeroing",
}
_VZ_T3_MAP = {
    "Rand": "random", "Attn": "attention_rollout", "Attn-norm": "rollout:attn_norm",
    "Attn-norm + RES": "rollout:attn_norm_res", "Attn-norm + RES + LN": "rollout:attn_norm_res_ln",
    "GlobEnc": "globenc", "ALTI": "alti", "GradXinput": "grad_x_input", "IG": "integrated_gradients",
    "DL": "deeplift", "Value Zeroing": "value_zeroing_rollout",
}


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in df.columns:
            df[c] = np.nan
    return df[COLUMNS]


def vz_table2() -> pd.DataFrame:
    """Value Zeroing Table 2: Spearman's rho between layer-wise MDL compression and layer-wise cue
    alignment (dot product), BERT-base, pre-trained (PT) and fine-tuned (FT). ``metric`` is
    ``"spearman_comp_vs_dot"``. GlobEnc and ALTI are their per-layer ("arrow", no rollout) versions.
    """
    data = [  # method, PT, FT
        ("Rand", -0.07, -0.02), ("Attn", 0.10, 0.08), ("Attn-norm", 0.52, 0.56),
        ("Attn-norm + RES", -0.35, -0.24), ("Attn-norm + RES + LN", 0.12, 0.17),
        ("GlobEnc (no rollout)", -0.01, -0.12), ("ALTI (no rollout)", -0.01, -0.12),
        ("GradXinput", -0.96, -0.99), ("IG", -0.86, -0.77), ("DL", -0.97, -1.00),
        ("Value Zeroing", 0.65, 0.64),
    ]
    rows = []
    for m, pt, ft in data:
        for cond, v in (("pre-trained", pt), ("fine-tuned", ft)):
            rows.append(dict(paper=VZ, table="Table 2", model="bert-base-uncased", condition=cond,
                             task="BLiMP number agreement (Test half)", method=m,
                             cmix_method=_VZ_T2_MAP[m], metric="spearman_comp_vs_dot", value=v,
                             source=f"{VZ_SRC}, Table 2"))
    return _frame(rows)


def vz_table3() -> pd.DataFrame:
    """Value Zeroing Table 3: Spearman's rho between blank-out scores and aggregated scores (rollout
    for context-mixing maps, gradients w.r.t. the input embeddings), BERT-base, PT and FT.
    ``cmix_method`` ``"rollout:X"`` means the rollout of the per-layer map ``X``.
    """
    data = [
        ("Rand", -0.01, 0.00), ("Attn", -0.10, -0.07), ("Attn-norm", 0.19, 0.14),
        ("Attn-norm + RES", 0.03, -0.05), ("Attn-norm + RES + LN", -0.08, -0.17),
        ("GlobEnc", -0.01, -0.09), ("ALTI", 0.17, 0.19), ("GradXinput", 0.11, 0.16),
        ("IG", 0.07, 0.21), ("DL", 0.20, 0.29), ("Value Zeroing", 0.26, 0.31),
    ]
    rows = []
    for m, pt, ft in data:
        for cond, v in (("pre-trained", pt), ("fine-tuned", ft)):
            rows.append(dict(paper=VZ, table="Table 3", model="bert-base-uncased", condition=cond,
                             task="BLiMP number agreement (Test half)", method=m,
                             cmix_method=_VZ_T3_MAP[m], metric="spearman_vs_blankout", value=v,
                             source=f"{VZ_SRC}, Table 3"))
    return _frame(rows)


_ALTI_MAP = {"Attn Rollout": "attention_rollout", "Norm Rollout": "rollout:attn_norm_res_ln", "ALTI": "alti"}


def alti_table2() -> pd.DataFrame:
    """ALTI Table 2: Spearman (mean ± std over 500 random samples) of the final-layer relevance row
    against grad-l2 (SST-2 test, fine-tuned models, [CLS] row) and against blank-out (SVA,
    pre-trained models, [MASK] row). "Norm Rollout" = rollout of Kobayashi et al. (2021) N-ResLN.
    """
    models = ["distilbert-base-uncased", "bert-base-uncased", "roberta-base"]
    data = {  # method: [SST2 distil, bert, roberta, SVA distil, bert, roberta] as (mean, std)
        "Attn Rollout": [(0.23, 0.24), (-0.03, 0.29), (0.01, 0.24), (0.23, 0.22), (-0.02, 0.20), (-0.09, 0.22)],
        "Norm Rollout": [(0.29, 0.26), (0.41, 0.26), (0.37, 0.21), (0.31, 0.20), (0.19, 0.19), (0.08, 0.22)],
        "ALTI": [(0.54, 0.17), (0.55, 0.19), (0.68, 0.17), (0.41, 0.17), (0.40, 0.16), (0.43, 0.18)],
    }
    rows = []
    for m, vals in data.items():
        for i, (v, s) in enumerate(vals):
            task = "SST-2" if i < 3 else "SVA"
            rows.append(dict(paper=ALTI, table="Table 2", model=models[i % 3],
                             condition="fine-tuned" if task == "SST-2" else "pre-trained",
                             task=task, method=m, cmix_method=_ALTI_MAP[m],
                             metric="spearman_vs_grad_l2" if task == "SST-2" else "spearman_vs_blankout",
                             value=v, std=s, source=f"{ALTI_SRC}, Table 2"))
    return _frame(rows)


def alti_repo_correlations() -> pd.DataFrame:
    """ALTI **repository** correlations (not the paper): the JSON files committed to
    ``mt-upc/transformer-contributions`` (last versions at bc7f494 / 4c0759a, deleted in
    b4f7251; book/reference_code.md §6). Three decimals; includes raw attention; sample
    count not recorded. ``table`` is ``"repo data/*_correlations.json"``.
    """
    models = {"BERT": "bert-base-uncased", "DistilBERT": "distilbert-base-uncased", "RoBERTa": "roberta-base"}
    data = [  # model, task, raw, rollout, norm, alti  (mean, std)
        ("BERT", "SST-2", (0.290, 0.281), (-0.034, 0.293), (0.414, 0.259), (0.551, 0.186)),
        ("DistilBERT", "SST-2", (0.226, 0.247), (0.234, 0.237), (0.294, 0.261), (0.542, 0.174)),
        ("RoBERTa", "SST-2", (0.240, 0.274), (0.014, 0.239), (0.365, 0.211), (0.681, 0.169)),
        ("BERT", "SVA", (0.244, 0.178), (-0.022, 0.203), (0.187, 0.195), (0.395, 0.155)),
        ("DistilBERT", "SVA", (0.382, 0.180), (0.232, 0.216), (0.305, 0.196), (0.413, 0.170)),
        ("RoBERTa", "SVA", (0.173, 0.196), (-0.092, 0.220), (0.084, 0.223), (0.434, 0.181)),
    ]
    names = [("raw", "attention"), ("Attn Rollout", "attention_rollout"),
             ("Norm Rollout", "rollout:attn_norm_res_ln"), ("ALTI", "alti")]
    rows = []
    for model, task, *vals in data:
        for (label, cm), (v, s) in zip(names, vals):
            rows.append(dict(paper=ALTI, table="repo data/*_correlations.json", model=models[model],
                             condition="fine-tuned" if task == "SST-2" else "pre-trained", task=task,
                             method=label, cmix_method=cm,
                             metric="spearman_vs_grad_l2" if task == "SST-2" else "spearman_vs_blankout",
                             value=v, std=s,
                             source="mt-upc/transformer-contributions committed JSON (bc7f494/4c0759a)"))
    return _frame(rows)


def alti_repo_special_token_ranks() -> pd.DataFrame:
    """Mean normalised rank of [CLS]/[SEP]/./, on SST-2 (the quantity of ALTI Figure 6; the figure's
    values are not printed in the paper text). From the repository's committed
    ``*_rank_special_tokens.json`` (book/reference_code.md §6 lists the files).
    """
    models = {"BERT": "bert-base-uncased", "DistilBERT": "distilbert-base-uncased", "RoBERTa": "roberta-base"}
    data = [("BERT", 0.64, 0.93, 0.85, 0.29, 0.52), ("DistilBERT", 0.58, 0.90, 0.81, 0.23, 0.48),
            ("RoBERTa", 0.50, 0.83, 0.83, 0.28, 0.39)]
    names = [("raw", "attention"), ("Attn Rollout", "attention_rollout"),
             ("Norm Rollout", "rollout:attn_norm_res_ln"), ("ALTI", "alti"), ("grad_l2", "grad_l2")]
    rows = []
    for model, *vals in data:
        for (label, cm), v in zip(names, vals):
            rows.append(dict(paper=ALTI, table="repo data/*_rank_special_tokens.json (Figure 6 quantity)",
                             model=models[model], condition="fine-tuned", task="SST-2", method=label,
                             cmix_method=cm, metric="special_token_normalized_rank", value=v,
                             source="mt-upc/transformer-contributions committed JSON"))
    return _frame(rows)


def alti_repo_anisotropy() -> pd.DataFrame:
    """Mean cosine similarity of random token pairs per layer, BERT-base fine-tuned on SST-2
    (``textattack/bert-base-uncased-SST-2``, the first 500 sentences of the GLUE SST-2 test
    split): the quantity of ALTI Figure 3, whose values the paper does not print. From the
    repository's committed ``cos_results/bert_sst2_cos_results.json`` (written by
    ``get_cos_mean`` in ``src/utils_contributions.py``), rounded to three decimals
    (book/reference_code.md §6).

    ``method`` is the JSON key: "embeddings" (the solid line: cosine of the hidden states of one
    random pair of distinct tokens per sentence, ``metric`` ``"mean_cosine_hidden"``) or
    "transformed vectors" (the dashed line: for the same kind of pair (a, b), the cosine of
    T_i(x_a) and T_i(x_b) for every query i, pooled over queries and sentences, ``metric``
    ``"mean_cosine_transformed"``). ``condition`` holds the layer, as in :func:`globenc_table2`:
    ``"L0"`` the embedding output and ``"Ll"`` layer l's output for the hidden states; for the
    transformed vectors the JSON's ``layer_k`` (k = 0..11) is layer k + 1 (``"L1"`` to ``"L12"``),
    the layer whose attention block they sum to. ``cmix_method`` is empty (no attribution method).
    """
    transformed = [0.040, 0.056, 0.061, 0.055, 0.057, 0.048, 0.071, 0.064, 0.089, 0.106, 0.172, 0.309]
    embeddings = [0.084, 0.177, 0.216, 0.180, 0.195, 0.216, 0.217, 0.206, 0.221, 0.234, 0.325, 0.438,
                  0.577]
    src = "mt-upc/transformer-contributions committed cos_results/bert_sst2_cos_results.json"
    rows = [dict(paper=ALTI, table="repo cos_results/bert_sst2_cos_results.json (Figure 3 quantity)",
                 model="bert-base-uncased", condition=f"L{layer}", task="SST-2", method=label,
                 metric=metric, value=v, source=src)
            for label, metric, first, values in (("embeddings", "mean_cosine_hidden", 0, embeddings),
                                                 ("transformed vectors", "mean_cosine_transformed", 1,
                                                  transformed))
            for layer, v in enumerate(values, start=first)]
    return _frame(rows)


_GE_MAP = {
    "W": "attention", "W-FixedRes": "w_fixedres", "W-Res": "w_res", "N": "attn_norm",
    "N-FixedRes": "n_fixedres", "N-Res": "attn_norm_res", "N-ResLN": "attn_norm_res_ln", "N-Enc": "globenc_layer",
}


def globenc_table1() -> pd.DataFrame:
    """GlobEnc Table 1 (BERT-base) and appendix Tables A.1 (BERT-large) and A.2 (ELECTRA-base):
    Spearman (mean ± std over the validation set) between the final-layer [CLS] row of the
    rollout-aggregated maps and gradient×input (L2) saliency; models fine-tuned on SST-2, MNLI,
    HateXplain. ``cmix_method`` is the per-layer map that is rolled out (N-Enc rolled out = GlobEnc).
    """
    methods = ["W", "W-FixedRes", "W-Res", "N", "N-FixedRes", "N-Res", "N-ResLN", "N-Enc"]
    tables = {
        ("Table 1", "bert-base-uncased"): [
            [(-0.11, 0.26), (-0.06, 0.22), (0.12, 0.26)], [(-0.24, 0.26), (-0.05, 0.26), (0.13, 0.28)],
            [(0.19, 0.26), (0.27, 0.25), (0.53, 0.24)], [(0.44, 0.20), (0.47, 0.16), (0.43, 0.22)],
            [(0.48, 0.20), (0.55, 0.16), (0.48, 0.22)], [(0.73, 0.13), (0.75, 0.10), (0.66, 0.17)],
            [(-0.21, 0.26), (-0.06, 0.26), (0.08, 0.28)], [(0.77, 0.12), (0.78, 0.09), (0.72, 0.17)]],
        ("Table A.1", "bert-large-uncased"): [
            [(-0.38, 0.16), (-0.61, 0.14), (-0.41, 0.25)], [(-0.25, 0.19), (-0.48, 0.19), (-0.21, 0.30)],
            [(-0.10, 0.21), (0.33, 0.23), (0.09, 0.30)], [(0.44, 0.24), (0.13, 0.27), (0.48, 0.25)],
            [(0.49, 0.24), (0.26, 0.25), (0.49, 0.30)], [(0.77, 0.11), (0.66, 0.12), (0.73, 0.16)],
            [(-0.07, 0.23), (-0.35, 0.24), (0.06, 0.32)], [(0.83, 0.08), (0.77, 0.09), (0.76, 0.17)]],
        ("Table A.2", "electra-base"): [
            [(-0.37, 0.19), (-0.31, 0.22), (0.02, 0.29)], [(-0.37, 0.19), (-0.24, 0.23), (0.01, 0.29)],
            [(-0.10, 0.22), (0.08, 0.25), (0.20, 0.27)], [(0.18, 0.21), (0.12, 0.21), (0.21, 0.26)],
            [(0.23, 0.22), (0.32, 0.23), (0.28, 0.26)], [(0.54, 0.17), (0.54, 0.14), (0.44, 0.21)],
            [(-0.24, 0.23), (-0.16, 0.24), (-0.07, 0.28)], [(0.64, 0.15), (0.68, 0.12), (0.47, 0.22)]],
    }
    rows = []
    for (table, model), block in tables.items():
        for m, vals in zip(methods, block):
            for task, (v, s) in zip(("SST-2", "MNLI", "HateXplain"), vals):
                rows.append(dict(paper=GE, table=table, model=model, condition="fine-tuned", task=task,
                                 method=m, cmix_method=_GE_MAP[m], metric="spearman_vs_gxi_l2_rollout",
                                 value=v, std=s, source=f"{GE_SRC}, {table}"))
    return _frame(rows)


def globenc_table2() -> pd.DataFrame:
    """GlobEnc Table 2: BERT-base fine-tuned on SST-2, Spearman (mean ± std) with saliency of the
    individual-layer ("Indiv.") and rollout-aggregated ("Rollout") [CLS] rows at layers 1, 6, 12 and the
    maximum over layers. ``metric`` holds the aggregation; ``condition`` holds the layer column.
    """
    data = {
        ("individual", "N"): [(-0.50, .18), (0.28, .23), (0.40, .21), (0.41, .21)],
        ("individual", "N-Res"): [(-0.48, .18), (0.29, .24), (0.41, .19), (0.41, .19)],
        ("individual", "N-Enc"): [(-0.47, .18), (0.29, .24), (0.41, .19), (0.41, .19)],
        ("rollout", "N"): [(-0.50, .18), (0.44, .20), (0.44, .20), (0.44, .20)],
        ("rollout", "N-Res"): [(-0.48, .18), (0.70, .14), (0.73, .13), (0.73, .13)],
        ("rollout", "N-Enc"): [(-0.47, .18), (0.74, .14), (0.77, .12), (0.78, .12)],
    }
    rows = []
    for (agg, m), vals in data.items():
        for col, (v, s) in zip(("L1", "L6", "L12", "MAX"), vals):
            rows.append(dict(paper=GE, table="Table 2", model="bert-base-uncased", condition=col, task="SST-2",
                             method=m, cmix_method=_GE_MAP[m], metric=f"spearman_vs_gxi_l2_{agg}",
                             value=v, std=s, source=f"{GE_SRC}, Table 2"))
    return _frame(rows)


def all_numbers() -> pd.DataFrame:
    """All transcribed numbers in one frame."""
    return pd.concat([vz_table2(), vz_table3(), alti_table2(), alti_repo_correlations(),
                      alti_repo_special_token_ranks(), alti_repo_anisotropy(), globenc_table1(),
                      globenc_table2()],
                     ignore_index=True)
