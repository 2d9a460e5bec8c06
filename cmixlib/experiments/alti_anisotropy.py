"""ALTI's Figure 3 (Ferrando et al. 2022, §3): the anisotropy of token representations, of the
transformed vectors and of the attention-block outputs, per layer (the mean pairwise cosine,
:mod:`cmixlib.metrics.anisotropy`), beside the repository's numbers, and §3's claims about it
as booleans (:func:`cmixlib.book.claims.rules_alti.fig3_claims`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from cmixlib.data import paper_numbers as pn
from cmixlib.experiments.common import batched, pad_id, padded_batch
from cmixlib.experiments.declaration import Experiment
from cmixlib.experiments.runner import Context
from cmixlib.experiments.sources import (CLASSIFIER_SETTINGS, SST2_CLASSIFIER, Data, Inputs, Model,
                                         ModelByCondition)
from cmixlib.forward.encoder import encoder_layers, iter_sentences, run_and_capture
from cmixlib.metrics.anisotropy import capture_anisotropy

__all__ = ["FIG3_ANISOTROPY", "fig3_anisotropy",
           "fig3_repo_frame"]




def fig3_anisotropy(ctx: Context) -> dict[str, pd.DataFrame]:
    """ALTI Figure 3 (the quantity of the repository's ``get_cos_mean``), with exact expectations
    (:mod:`cmixlib.metrics.anisotropy`) in place of one random pair of positions per sentence. For each
    SST-2 test sentence (the first ``limit``, as the code: the first 500 of the GLUE test split)
    and layer, the mean pairwise cosine (c = (||sum_k u_k||^2 - N) / (N(N-1)), u_k unit vectors)
    of: ``hidden``, the token representations of layers 0..L (embedding output, layer outputs;
    the code's solid line); ``transformed``, for each query i of layer l = 1..L the transformed
    vectors T_i(x_j), j = 1..n (the dashed line); ``attn_output``, the attention-block outputs
    y_i (LN1 outputs) of layer l, what the caption names (the code measures the hidden states).
    ``pool="queries"`` averages the transformed vectors' values over all (sentence, query) pairs,
    as the code (it concatenates the per-query cosines of all sentences); ``"sentences"`` first
    averages over the queries of each sentence. Hidden states and attention-block outputs: one
    value per sentence, averaged over sentences. Result: layer, kind, mean, std (population,
    over the pooled units), n (units). ``include_special=False`` drops the first and last
    positions as vectors and as queries (the code keeps them); sentences left with fewer than two
    tokens are skipped with a note. ``condition``: "finetuned" (the SST-2 classifier of Table 2)
    or "pretrained" (the bare encoder)."""
    s = ctx.settings
    if s["pool"] not in ("queries", "sentences"):
        raise ValueError(f"pool must be 'queries' (the code's) or 'sentences', not {s['pool']!r}")
    keep_special = bool(s["include_special"])
    bundle, _, examples = ctx.load_inputs()
    mods = encoder_layers(bundle.model)
    min_len = 2 if keep_special else 4
    idx = [k for k, ex in enumerate(examples) if len(ex["input_ids"]) >= min_len]
    if len(idx) < len(examples):
        ctx.note(f"{len(examples) - len(idx)} sentence(s) with fewer than two kept tokens skipped")
    pad = pad_id(bundle.tokenizer)

    def rows(batch):
        cap = run_and_capture(bundle.model, *padded_batch(batch, pad))
        return [{k: v.cpu().numpy() for k, v in capture_anisotropy(cap, mods, b, keep, keep_special).items()}
                for b, keep in enumerate(iter_sentences(cap))]

    per = batched(ctx, [examples[k] for k in idx], rows, desc="ALTI Figure 3")
    units: dict[tuple[str, int], list[float]] = {}
    per_rows = []
    for pos, k in enumerate(idx):
        a = per[pos]
        values = [("hidden", layer, v, v) for layer, v in enumerate(a["hidden"])]
        values += [("attn_output", layer, v, v) for layer, v in enumerate(a["attn_output"], start=1)]
        values += [("transformed", layer, q.mean(), q if s["pool"] == "queries" else q.mean())
                   for layer, q in enumerate(a["transformed"], start=1)]
        for kind, layer, v, unit in values:
            units.setdefault((kind, layer), []).extend(np.atleast_1d(unit).tolist())
            per_rows.append({"example": k, "n_tokens": len(examples[k]["input_ids"]), "kind": kind,
                             "layer": layer, "value": float(v)})
    result = pd.DataFrame([{"layer": layer, "kind": kind, "mean": float(np.mean(v)), "std": float(np.std(v)),
                            "n": len(v)} for (kind, layer), v in units.items()],
                          columns=["layer", "kind", "mean", "std", "n"])
    ctx.info["layers"] = len(mods)
    return {"result": result, "per_sentence": pd.DataFrame(per_rows)}


def fig3_repo_frame(paper: pd.DataFrame) -> pd.DataFrame:
    """The repository's Figure 3 numbers (:func:`cmixlib.data.paper_numbers.alti_repo_anisotropy`) as
    a result frame: layer, kind ("hidden"/"transformed"), mean, paper_model."""
    kinds = {"mean_cosine_hidden": "hidden", "mean_cosine_transformed": "transformed"}
    p = paper[paper["metric"].isin(kinds)]
    return pd.DataFrame({"layer": p["condition"].str[1:].astype(int), "kind": p["metric"].map(kinds),
                         "mean": p["value"].astype(float), "paper_model": p["model"]}).reset_index(drop=True)


def _fig3_compare(frames, paper: pd.DataFrame) -> pd.DataFrame:
    """Ours beside the repository's per (kind, layer) when both models have the same number of
    layers; otherwise the two sets of rows one under the other (no row pairs layers of different
    depths). ``depth`` = layer / L of the row's own model."""
    ours = frames["result"].rename(columns={"mean": "ours", "std": "ours_std"})
    repo = fig3_repo_frame(paper).rename(columns={"mean": "paper"})
    n_ours, n_repo = (int(d.loc[d["kind"] == "hidden", "layer"].max()) for d in (ours, repo))
    ours = ours.assign(depth=ours["layer"] / n_ours)
    repo = repo.assign(depth=repo["layer"] / n_repo)
    if n_ours == n_repo:
        return ours.merge(repo.drop(columns="depth"), on=["kind", "layer"], how="outer")
    return pd.concat([ours, repo], ignore_index=True)


def _fig3_summary(frames) -> str:
    table = frames["result"].pivot_table(index="layer", columns="kind", values="mean")
    return "mean pairwise cosine per layer:\n" + table.to_string(float_format=lambda v: f"{v:.3f}")


FIG3_ANISOTROPY = Experiment(
    name="alti-fig3-anisotropy",
    title="Mean cosine of token representations and of transformed vectors per layer (SST-2)",
    paper="ALTI (Figure 3)", compute=fig3_anisotropy,
    inputs=Inputs(ModelByCondition({"finetuned": SST2_CLASSIFIER, "pretrained": Model("base")}),
                  Data("sst2_test")),
    defaults={"condition": "finetuned", "include_special": True, "pool": "queries", **CLASSIFIER_SETTINGS},
    paper_numbers=pn.alti_repo_anisotropy, compare=_fig3_compare, summary=_fig3_summary)
