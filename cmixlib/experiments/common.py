"""Plumbing shared by the experiments of all three papers: batching examples by length, the
target (or [CLS]) row of every method for a padded batch, excluded positions, and our numbers
beside the papers'. (Means with t intervals and correlations: :mod:`cmixlib.metrics.statistics`.)"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from cmixlib.models.arch import num_layers
from cmixlib.models.devices import model_device
from cmixlib.forward.batching import length_batches, pad_sequences
from cmixlib.experiments.spec import RunView
from cmixlib.gradients import ClassTarget, MLMTarget, batch_attribute, random_scores
from cmixlib.gradients.erasure import blank_out_batch
from cmixlib.methods import dispatch as core
from cmixlib.methods.aggregation import rollout
from cmixlib.methods.options import ValueZeroing

__all__ = ["IG_STEPS", "GRADIENT_METHODS", "BATCH_SIZE", "pad_id", "padded_batch",
           "target_rows_batch", "target_rows", "batched_rows", "cls_rows_batch", "mlm_target",
           "exclude_positions", "comparison_table",
           "describe", "ids_tensor", "predicted_classes", "blank_out_rows", "batched"]

#: Gauss-Legendre steps of integrated gradients in the Value Zeroing experiments. Layer-wise IG costs
#: one pass through the layers above l for every step and layer, the largest share of
#: vz-cue-alignment; benchmarks/bench_cue_alignment.py measures the trade-off (maps at 4 steps
#: against 50: median Spearman 0.99 on the fine-tuned model) that keeps the whole experiment within
#: 15 minutes on 2 CPU cores. Use ``--set ig_steps=16`` (or more) for converged maps.
IG_STEPS = 4

#: VZ Figure 1-2 / Table 2 methods -> how to compute them (and ALTI Appendix B's ``|gradient · input|``).
GRADIENT_METHODS = {"grad_x_input": "grad_x_input_l2", "integrated_gradients": "integrated_gradients",
                    "deeplift": "deeplift", "grad_l2": "grad_l2", "grad_x_input_abs": "grad_x_input_abs"}

#: tokens per forward of :func:`blank_out_rows` (sequences x padded length). benchmarks/
#: bench_blank_out.py, 32 examples, 1 thread: 30-token SVA sentences 0.98-1.02x the time of one
#: sentence at a time at 1-4 k tokens, 0.74x in one forward of the whole batch; 8-token BLiMP
#: sentences 1.4-1.7x at any size
BLANK_OUT_TOKENS = 2048

#: examples per batch in the experiments (sorted by length first, so padding stays small); results
#: do not depend on it beyond float rounding (padded batches are tested against single runs)
BATCH_SIZE = 32


def pad_id(tokenizer) -> int:
    """The id the experiments pad batches with: the tokenizer's ``pad_token_id``, 0 when it has
    none (or no tokenizer is given); padded positions are masked, so the value does not change
    a result."""
    return int(getattr(tokenizer, "pad_token_id", None) or 0)


def describe(bundle, info: dict | None = None) -> str:
    """The bundle's description (its ``describe()``, else its name), with the accuracy in ``info``."""
    text = bundle.describe() if hasattr(bundle, "describe") else str(getattr(bundle, "name", bundle))
    if info and info.get("accuracy") is not None:
        text += f"; accuracy {info['accuracy']:.3f}"
    return text


def ids_tensor(ex) -> torch.Tensor:
    """``(1, n)`` long tensor of one example's ``input_ids``."""
    return torch.as_tensor([list(ex["input_ids"])], dtype=torch.long)


def blank_out_rows(bundle, batch: list[dict], replacement: str) -> list[np.ndarray]:
    r"""Blank-out scores :math:`p(t \mid x) - p(t \mid x_{j \leftarrow r})` at the [MASK] of each
    MLM example of a padded batch (probability of the target over target and foil; every position
    erased, special ones too), ``(n,)`` each: one :func:`cmixlib.gradients.blank_out_batch` call,
    equal to :func:`cmixlib.gradients.blank_out` of each example alone up to float rounding. The
    sequences (each example and its erased copies) run about :data:`BLANK_OUT_TOKENS` tokens per
    forward."""
    ids, mask = padded_batch(batch, pad_id(bundle.tokenizer))
    targets = [MLMTarget(int(ex["target_index"]), int(ex["target_id"]), int(ex["foil_id"]))
               for ex in batch]
    bo = blank_out_batch(bundle.model, ids, targets, attention_mask=mask, replacement=replacement,
                         tokenizer=bundle.tokenizer, skip_special=False,
                         batch_size=max(1, BLANK_OUT_TOKENS // ids.shape[1]))
    return [row[:len(ex["input_ids"])] for row, ex in zip(bo, batch)]


@torch.no_grad()
def predicted_classes(bundle, examples: Sequence[dict]) -> np.ndarray:
    r"""The class a sequence classifier predicts for each example, :math:`\arg\max_c z_c`, in
    the examples' order: one right-padded forward per length batch of :data:`BATCH_SIZE`
    (:func:`cmixlib.forward.batching.length_batches`; a batch the experiments hand over is
    already one such batch, run as it is). Padding is masked, so each prediction equals that
    of the example alone up to float rounding."""
    dev = model_device(bundle.model)
    out = np.zeros(len(examples), dtype=np.int64)
    for idx in length_batches([len(ex["input_ids"]) for ex in examples], BATCH_SIZE):
        ids, mask = padded_batch([examples[i] for i in idx], pad_id(bundle.tokenizer))
        res = bundle.model(input_ids=ids.to(dev), attention_mask=mask.to(dev))
        out[idx] = (res.logits if hasattr(res, "logits") else res[0]).argmax(-1).cpu().numpy()
    return out


def mlm_target(ex, settings: Mapping):
    """The :class:`cmixlib.gradients.MLMTarget` of a BLiMP/SVA example (``grad_score`` setting)."""
    return MLMTarget(int(ex["target_index"]), int(ex["target_id"]),
                     None if ex.get("foil_id") is None else int(ex["foil_id"]),
                     score=settings.get("grad_score", "prob"))


def _example_batches(examples: list[dict]) -> list[list[int]]:
    return length_batches([len(ex["input_ids"]) for ex in examples], BATCH_SIZE)


def padded_batch(examples: list[dict], pad_id: int = 0):
    """``(input_ids, attention_mask)`` ``(B, n)`` long tensors of the examples' ``input_ids``,
    right-padded with ``pad_id`` (:func:`cmixlib.forward.batching.pad_sequences`)."""
    return pad_sequences([ex["input_ids"] for ex in examples], int(pad_id))


def target_rows_batch(bundle, exs: list[dict], methods: list[str], settings: Mapping, *, level: str,
                      seeds: list[int]) -> list[dict[str, np.ndarray]]:
    """For each example, the scores of its target row for each method: ``(L, n)`` (level="layers")
    or ``(n,)`` (level="input": the last layer of context-mixing maps and rollouts, gradients at the
    word embeddings). One padded forward for the context-mixing maps and one
    :func:`cmixlib.gradients.batch_attribute` call for all gradient methods serve the whole batch.
    Methods: those of :data:`cmixlib.METHODS`, ``"rollout:X"``, :data:`GRADIENT_METHODS`,
    ``"random"`` (uniform, seeded per example with ``seeds``) and ``"nearness"``
    (``-|j - t|``, t the target position; the same in every layer)."""
    model, tok = bundle.model, bundle.tokenizer
    lengths = [len(ex["input_ids"]) for ex in exs]
    ids, mask = padded_batch(exs, pad_id(tok))
    pos = [int(ex["target_index"]) for ex in exs]
    out: list[dict[str, np.ndarray]] = [{} for _ in exs]
    cm_methods = [m for m in methods if m in core.METHODS]
    roll_bases = [m.split(":", 1)[1] for m in methods if m.startswith("rollout:")]
    need = sorted(set(cm_methods) | set(roll_bases))
    if need:
        rows = [[t] for t in pos] if not roll_bases and level == "layers" else None
        # the last layer is read at the target rows only (lower layers whole, for rollouts)
        vz = dict(distance=settings.get("vz_distance", "cosine"),
                  standardize=settings.get("vz_standardize"))
        asked = [ValueZeroing(m, **vz) if m.startswith("value_zeroing") else m for m in need]
        maps = core.context_mixing(model, tok, {"input_ids": ids, "attention_mask": mask},
                                   methods=asked, rows=rows, final_rows=[[t] for t in pos])
        maps = maps if isinstance(maps, list) else [maps]
        for b, t in enumerate(pos):
            for m in cm_methods:
                out[b][m] = maps[b][m][:, t, :] if level == "layers" else maps[b][m][-1, t, :]
            for base in roll_bases:
                r = rollout(maps[b][base], add_identity=False, normalize=True, rows=[t])
                out[b][f"rollout:{base}"] = r[:, t, :] if level == "layers" else r[-1, t, :]
    grad = [m for m in methods if m in GRADIENT_METHODS]
    if grad:
        res = batch_attribute(model, ids, [mlm_target(ex, settings) for ex in exs],
                              [GRADIENT_METHODS[m] for m in grad], level, attention_mask=mask, tokenizer=tok,
                              aggregate=settings.get("grad_aggregate", "l2"), n_steps=settings.get("ig_steps", IG_STEPS))
        for b in range(len(exs)):
            for m in grad:
                out[b][m] = res[GRADIENT_METHODS[m]][b][..., :lengths[b]]
    if "random" in methods:
        L = num_layers(model)
        for b in range(len(exs)):
            out[b]["random"] = random_scores(int(lengths[b]), seed=seeds[b],
                                             num_layers=L if level == "layers" else None)
    if "nearness" in methods:
        L = num_layers(model)
        for b, t in enumerate(pos):
            near = -np.abs(np.arange(lengths[b]) - t).astype(float)
            out[b]["nearness"] = np.tile(near, (L, 1)) if level == "layers" else near
    return [{m: o[m] for m in methods} for o in out]


def target_rows(bundle, ex, methods: list[str], settings: Mapping, *, level: str, seed: int) -> dict[str, np.ndarray]:
    """Scores of the target row of one example (see :func:`target_rows_batch`)."""
    return target_rows_batch(bundle, [ex], methods, settings, level=level, seeds=[seed])[0]


def batched_rows(ctx: RunView, bundle, examples: list[dict], *, level: str, desc: str):
    """Yield ``(index, example, {method: target-row scores})`` for ``ctx.settings["methods"]``, one
    length batch at a time (:func:`target_rows_batch`), with a progress bar; the random baseline of
    example ``i`` is seeded with ``seed * 100003 + i``."""
    s = ctx.settings
    with ctx.tqdm(None, total=len(examples), desc=desc) as bar:
        for idx in _example_batches(examples):
            batch = [examples[i] for i in idx]
            scores = target_rows_batch(bundle, batch, list(s["methods"]), s, level=level,
                                       seeds=[int(s.get("seed", 0)) * 100003 + i for i in idx])
            yield from zip(idx, batch, scores)
            bar.update(len(idx))


def batched(ctx: RunView, examples: list[dict], rows, *, desc: str) -> dict[int, Any]:
    """``{index: rows(batch)[k]}`` over the length batches of ``examples`` (``rows`` maps a list of
    examples to one value per example), with a progress bar."""
    out: dict[int, Any] = {}
    with ctx.tqdm(None, total=len(examples), desc=desc) as bar:
        for idx in _example_batches(examples):
            out.update(zip(idx, rows([examples[i] for i in idx])))
            bar.update(len(idx))
    return out


def cls_rows_batch(bundle, batch: list[dict], methods: list[str],
                   settings: Mapping | None = None) -> list[dict[str, np.ndarray]]:
    """For sentence-classification examples (target position 0, [CLS]): the final-layer [CLS] row
    of each context-mixing method and rollout (:func:`target_rows_batch`, level "input"), and each
    gradient method of the predicted class's probability w.r.t. the word embeddings
    (:func:`cmixlib.gradients.batch_attribute`), one padded batch at a time. ``settings`` may set
    ``ig_steps`` and ``grad_aggregate`` (IG / DeepLift; default: batch_attribute's 50 and "sum")."""
    settings = settings or {}
    mix = [m for m in methods if m not in GRADIENT_METHODS]
    out = (target_rows_batch(bundle, batch, mix, settings, level="input", seeds=[0] * len(batch))
           if mix else [{} for _ in batch])
    grad = [m for m in methods if m in GRADIENT_METHODS]
    if grad:
        ids, mask = padded_batch(batch, pad_id(bundle.tokenizer))
        kw = {k: settings[s] for s, k in (("ig_steps", "n_steps"), ("grad_aggregate", "aggregate"))
              if s in settings}
        res = batch_attribute(bundle.model, ids, [ClassTarget(None, score="prob")] * len(batch),
                              [GRADIENT_METHODS[m] for m in grad], "input", attention_mask=mask,
                              tokenizer=bundle.tokenizer, **kw)
        for b, ex in enumerate(batch):
            for m in grad:
                out[b][m] = res[GRADIENT_METHODS[m]][b][:len(ex["input_ids"])]
    return [{m: o[m] for m in methods} for o in out]


def exclude_positions(ex, mode: str | None) -> list[int] | None:
    """Positions left out of a per-example score: ``mode`` "none" (None), "special" ([CLS] and
    [SEP]: first and last), "target" or "special+target"."""
    if mode in (None, "none"):
        return None
    n = len(ex["input_ids"])
    ex_pos: list[int] = []
    if "special" in mode:
        ex_pos += [0, n - 1]
    if "target" in mode:
        ex_pos.append(int(ex["target_index"]))
    return sorted(set(ex_pos))


def comparison_table(ours: pd.DataFrame, paper: pd.DataFrame, on: list[str], *,
                     ours_value: str = "mean", paper_filter: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Outer-merge our numbers with the paper's on ``on`` (e.g. ``["cmix_method", "condition"]``).

    Columns: the keys, ``ours`` (+ ``ours_std`` if present), ``paper``, ``paper_std``,
    ``paper_model``, ``paper_method`` (the printed label).
    """
    p = paper.drop(columns=["paper"], errors="ignore")
    for k, v in (paper_filter or {}).items():
        p = p[p[k] == v]
    if "method" in p.columns:
        p["paper_method"] = p["method"]
    p = p.rename(columns={"value": "paper", "std": "paper_std", "model": "paper_model"})
    keep = [c for c in on + ["paper", "paper_std", "paper_model", "paper_method"] if c in p.columns]
    o = ours.rename(columns={ours_value: "ours", "std": "ours_std"})
    okeep = [c for c in on + ["ours", "ours_std", "n"] if c in o.columns]
    return o[okeep].merge(p[keep], on=on, how="outer")
