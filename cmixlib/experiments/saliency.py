r"""Example maps: every method's scores for one input, as the papers' qualitative figures show them.

The three papers illustrate their methods on single sentences: ALTI's saliency tables (Tables 1,
3-9: one coloured token row per method), GlobEnc's ``[CLS]`` rows across layers (Figures 1,
A.1-A.4) and full rolled-out maps (Figure A.3), Value Zeroing's most influential tokens on the
``[MASK]`` representation (Figure 4) and its per-layer maps (Figures A.5-A.18). This module owns
what those figures need beyond the methods themselves:

* :func:`experiment_inputs`: the model (and examples) an experiment reads, loaded exactly as its
  run loads them, so that a figure of one sentence uses the run's cached model;
* :func:`text_example`, :func:`find_example`, :func:`select_examples`, :data:`PAPER_SENTENCES`:
  examples typed from a paper, found in our data, or chosen by a stated rule;
* :func:`target_probabilities` (and :func:`cmixlib.experiments.common.predicted_classes`): what
  the model predicts for them;
* :func:`example_rows`: the target row of several methods for one example, :math:`s^m_j` for
  every method :math:`m` and token :math:`j` (the ``[CLS]`` row of a classifier, the ``[MASK]``
  row of an MLM), computed by :func:`cmixlib.experiments.common.cls_rows_batch`,
  :func:`~cmixlib.experiments.common.target_rows_batch` and :func:`cmixlib.gradients.blank_out`;
* :func:`rollout_maps`: GlobEnc's aggregation of layer maps, :math:`\hat C^{\ell} = C^{\ell}
  \hat C^{\ell-1}` of the raw maps, rows then scaled to sum to 1 for display.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from cmixlib.experiments.common import (GRADIENT_METHODS, cls_rows_batch, ids_tensor, mlm_target,
                                        pad_id, target_rows_batch)
from cmixlib.experiments.declaration import REGISTRY
from cmixlib.experiments.runner import Context
from cmixlib.forward.batching import length_batches, pad_sequences
from cmixlib.gradients import ClassTarget, MLMTarget, ScoreModule, blank_out, target_tensors
from cmixlib.methods import dispatch as core
from cmixlib.methods.aggregation import normalize_rows, rollout
from cmixlib.methods.dispatch import METHODS
from cmixlib.models.devices import model_device
from cmixlib.models.loading import default_model_name

__all__ = ["PAPER_SENTENCES", "ALTI_GRADIENTS", "experiment_settings", "experiment_inputs",
           "text_example", "find_example", "select_examples",
           "target_probabilities", "example_rows", "rollout_maps"]

#: Example sentences typed from the papers' tables where our data does not hold them. ALTI's SST-2
#: examples come from SST-2's test split and its SVA examples from Goldberg's version of the
#: Linzen et al. data, neither of which is in ``data/``; the words are the tables' own.
PAPER_SENTENCES: dict[str, dict[str, str]] = {
    "alti-table1": {
        "text": "a remarkable 179-minute meditation on the nature of revolution .",
        "source": "Ferrando et al. 2022, Table 1 (and Table 5): a positive SST-2 sentence"},
    "alti-table3": {
        "text": "a 1770s map of philadelphia's naval defenses [MASK] a fort on the island , "
                "but it is unidentified .",
        "target_word": "shows", "foil_word": "show",
        "source": "Ferrando et al. 2022, Table 3 (and Table 9): an SVA sentence whose predicted "
                  "word is 'shows'"},
}

#: ALTI's gradient baselines (Appendix B): the predicted class's probability, gradient · input and
#: integrated gradients aggregated by the absolute value of the sum over dimensions.
ALTI_GRADIENTS = {"grad_aggregate": "abs", "grad_score": "prob"}

_MASK_PLACEHOLDER = "[MASK]"


def experiment_settings(experiment: str, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings a run of ``experiment`` with ``settings`` uses: its defaults, overridden by
    ``settings`` (an unknown key is an error, as in :func:`cmixlib.experiments.run_experiment`)."""
    if experiment not in REGISTRY:
        raise KeyError(f"Unknown experiment {experiment!r}. Known: {', '.join(sorted(REGISTRY))}")
    defaults = REGISTRY[experiment].defaults
    unknown = sorted(set(settings or {}) - set(defaults))
    if unknown:
        raise ValueError(f"Experiment {experiment!r} has no setting(s) {unknown}; "
                         f"settings: {sorted(defaults)}")
    return {**defaults, **(settings or {})}


def experiment_inputs(experiment: str, settings: Mapping[str, Any] | None = None,
                      task: str | None = None, *, limit: int | None = None, model: str | None = None,
                      data: bool = True, sources: Any = None,
                      ) -> tuple[Any, dict | None, list[dict] | None]:
    """``(bundle, info, examples)`` that experiment ``experiment`` reads with ``settings`` (merged
    with its defaults; e.g. a book run's, :func:`cmixlib.book.runs.run_arguments`) for ``task``,
    loaded through its declared inputs and ``sources`` (default
    :class:`cmixlib.experiments.Sources`), as its run loads them: a trained model comes from the
    same training cache. ``limit`` as the run's; ``data=False`` loads only the model
    (``examples`` is None)."""
    merged = experiment_settings(experiment, settings)
    exp = REGISTRY[experiment]
    if isinstance(exp.inputs, Mapping) and task not in exp.inputs:
        raise ValueError(f"Experiment {experiment!r} reads one model per task: pass task= one of "
                         f"{list(exp.inputs)}.")
    ctx = Context(experiment=experiment, model=model or default_model_name(), limit=limit,
                  settings=merged, progress=False, inputs=exp.inputs, sources=sources)
    spec = exp.inputs[task] if isinstance(exp.inputs, Mapping) else exp.inputs
    if not data or spec.data is None:
        bundle, info = spec.model.load(ctx.sources, task)
        return bundle, info, None
    return ctx.load_inputs(task)


def text_example(tokenizer, text: str, *, target_word: str | None = None,
                 foil_word: str | None = None) -> dict:
    """An example dict, as :mod:`cmixlib.data` returns them, from raw ``text``.

    Without ``target_word``: a classification input (``target_index`` 0, the ``[CLS]`` row).
    With ``target_word`` and ``foil_word``: ``text`` holds ``[MASK]`` once (the tokenizer's own
    mask token also works); ``target_id``/``foil_id`` are the ids the two words get in that
    position, each of which must be a single sub-token there."""
    mask = getattr(tokenizer, "mask_token", None)
    if (target_word is None) != (foil_word is None):
        raise ValueError("Give both target_word and foil_word (an MLM example), or neither.")
    if target_word is None:
        ids = tokenizer(text)["input_ids"]
        return {"sentence": text, "input_ids": list(ids),
                "tokens": tokenizer.convert_ids_to_tokens(ids), "target_index": 0}
    if mask is None:
        raise ValueError("An MLM example needs a tokenizer with a mask token.")
    text = text.replace(_MASK_PLACEHOLDER, mask)
    if text.count(mask) != 1:
        raise ValueError(f"The text must hold the mask ({_MASK_PLACEHOLDER} or {mask}) exactly "
                         f"once: {text!r}")
    ids = list(tokenizer(text)["input_ids"])
    pos = ids.index(tokenizer.mask_token_id)
    word_ids = []
    for word in (target_word, foil_word):
        filled = list(tokenizer(text.replace(mask, word))["input_ids"])
        if len(filled) != len(ids) or filled[:pos] + filled[pos + 1:] != ids[:pos] + ids[pos + 1:]:
            raise ValueError(f"{word!r} is not one sub-token in place of the mask in {text!r}; "
                             "choose a word the tokenizer keeps whole.")
        word_ids.append(int(filled[pos]))
    return {"sentence": text, "input_ids": ids, "tokens": tokenizer.convert_ids_to_tokens(ids),
            "target_index": pos, "target_id": word_ids[0], "foil_id": word_ids[1],
            "target_word": target_word, "foil_word": foil_word}


def _normal(text: str) -> str:
    return " ".join(str(text).lower().split())


def find_example(examples: Sequence[dict], text: str) -> dict:
    """The first example whose ``sentence`` (SST-2, SVA) or ``sentence_good`` (BLiMP) is ``text``,
    ignoring case and runs of spaces; a LookupError when none is."""
    want = _normal(text)
    for ex in examples:
        if any(_normal(ex[k]) == want for k in ("sentence", "sentence_good") if k in ex):
            return ex
    raise LookupError(f"No example reads {text!r} (among {len(examples)}).")


def select_examples(examples: Sequence[dict], k: int, *, min_tokens: int = 0,
                    max_tokens: int | None = None, keep: Sequence[bool] | None = None) -> list[dict]:
    """The first ``k`` examples (in the given order) with ``min_tokens`` to ``max_tokens`` tokens
    (special tokens included) and, with ``keep`` (one flag per example), only flagged ones."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if keep is not None and len(keep) != len(examples):
        raise ValueError(f"keep has {len(keep)} flags for {len(examples)} examples")
    out = []
    for i, ex in enumerate(examples):
        n = len(ex["input_ids"])
        if n >= min_tokens and (max_tokens is None or n <= max_tokens) and (keep is None or keep[i]):
            out.append(ex)
            if len(out) == k:
                break
    return out


def _per_batch(bundle, examples: Sequence[dict], score, size: int = 32) -> np.ndarray:
    """``score(chunk, ids, mask) -> (B,)`` over length-sorted padded batches of ``examples``
    (:func:`cmixlib.forward.batching.length_batches`), returned in the examples' order."""
    pad = pad_id(bundle.tokenizer)
    device = model_device(bundle.model)
    out = np.zeros(len(examples))
    for idx in length_batches([len(ex["input_ids"]) for ex in examples], size):
        chunk = [examples[i] for i in idx]
        ids, mask = pad_sequences([ex["input_ids"] for ex in chunk], pad, device)
        out[idx] = score(chunk, ids, mask).detach().to("cpu", torch.float64).numpy()
    return out


@torch.no_grad()
def target_probabilities(bundle, examples: Sequence[dict]) -> np.ndarray:
    r"""For MLM examples (``target_index``, ``target_id``, ``foil_id``): the probability of the
    target over the two candidates at the mask, :math:`p = \sigma(z_t - z_f)` (above 0.5: the
    model prefers the target)."""
    def prob(chunk, ids, mask):
        targets = [mlm_target(ex, {"grad_score": "prob"}) for ex in chunk]
        score = ScoreModule(bundle.model, targets, score="prob")
        return score(ids, mask, *target_tensors(targets, ids.device))

    return _per_batch(bundle, examples, prob)


def _check_methods(methods: Sequence[str], level: str, mlm: bool) -> None:
    if isinstance(methods, str) or not len(methods):
        raise ValueError("methods must be a non-empty list of method names.")
    layer_wise = [n for n, m in METHODS.items() if m.kind == "layer"]
    valid = set(METHODS) | set(GRADIENT_METHODS) | {f"rollout:{m}" for m in layer_wise} | {"blank_out"}
    bad = [m for m in methods if m not in valid]
    if bad:
        raise ValueError(f"Unknown method(s) {bad}. Valid: context-mixing methods {sorted(METHODS)}, "
                         f"'rollout:<layer-wise method>', gradient methods {sorted(GRADIENT_METHODS)} "
                         "and 'blank_out'.")
    if level not in ("input", "layers"):
        raise ValueError(f"level must be 'input' or 'layers', not {level!r}")
    if level == "layers" and "blank_out" in methods:
        raise ValueError("blank_out perturbs input tokens: it has no per-layer scores (use level='input').")
    if level == "layers" and not mlm and any(m in GRADIENT_METHODS for m in methods):
        raise ValueError("Per-layer gradients are computed for MLM examples only; use level='input'.")


def example_rows(bundle, example: Mapping, methods: Sequence[str], settings: Mapping | None = None,
                 *, level: str = "input", replacement: int | str = "unk") -> dict[str, np.ndarray]:
    r"""The target row of each method for one example: ``{method: scores}``, ``(n,)`` at level
    "input" or ``(L, n)`` at level "layers" (row :math:`\ell`: layer :math:`\ell` for layer-wise
    maps, the rollout up to layer :math:`\ell` for aggregated ones).

    The target row is the ``[CLS]`` row (position 0) of a classification example and the mask
    row of an MLM example (one with ``target_id`` and ``foil_id``). Methods: those of
    :data:`cmixlib.METHODS`, ``"rollout:X"`` (the row-normalised rollout of layer-wise X), the
    gradient methods of :data:`cmixlib.experiments.GRADIENT_METHODS` and ``"blank_out"``:

    * context-mixing rows: :math:`C_{t,j}` of the final layer (or every layer);
    * gradients of :math:`f` (the predicted class's probability :math:`\mathrm{softmax}(z)_c`;
      for an MLM ``settings["grad_score"]``, default :math:`\sigma(z_t - z_f)`) w.r.t. the word
      embeddings :math:`x_j`: :math:`\lVert g_j\rVert`, :math:`\lVert g_j \odot x_j\rVert`,
      :math:`|g_j \cdot x_j|`, integrated gradients / DeepLift aggregated over dimensions by
      ``settings["grad_aggregate"]`` with ``settings["ig_steps"]`` steps ([MASK] baseline);
    * blank-out: :math:`p(y \mid x) - p(y \mid x_{j \leftarrow r})` for every position,
      special ones included, with :math:`r` = ``replacement`` (:func:`cmixlib.gradients.blank_out`).

    The rows come from :func:`cmixlib.experiments.common.cls_rows_batch` (classification) and
    :func:`~cmixlib.experiments.common.target_rows_batch` (MLM), as in the experiments.
    """
    if "input_ids" not in example or not len(example["input_ids"]):
        raise ValueError("example must hold non-empty 'input_ids' (see text_example).")
    mlm = example.get("target_id") is not None
    if mlm and example.get("foil_id") is None:
        raise ValueError("An MLM example needs both 'target_id' and 'foil_id'.")
    _check_methods(methods, level, mlm)
    methods = list(methods)
    settings = dict(settings or {})
    ex = dict(example)
    ex.setdefault("target_index", 0)
    rest = [m for m in methods if m != "blank_out"]
    rows: dict[str, np.ndarray] = {}
    if rest and (mlm or level == "layers"):
        rows = target_rows_batch(bundle, [ex], rest, settings, level=level, seeds=[0])[0]
    elif rest:
        rows = cls_rows_batch(bundle, [ex], rest, settings)[0]
    if "blank_out" in methods:
        target = (MLMTarget(int(ex["target_index"]), int(ex["target_id"]), int(ex["foil_id"])) if mlm
                  else ClassTarget(None))
        rows["blank_out"] = blank_out(bundle.model, ids_tensor(ex), target, replacement=replacement,
                                      tokenizer=bundle.tokenizer, skip_special=False)
    return {m: np.asarray(rows[m], dtype=float) for m in methods}


def rollout_maps(bundle, example: Mapping, methods: Sequence[str], *,
                 raw: bool = True) -> dict[str, np.ndarray]:
    r"""Rolled-out maps ``(L, n, n)`` of layer-wise methods, as GlobEnc aggregates them:
    :math:`\hat C^{1} = C^{1}`, :math:`\hat C^{\ell} = C^{\ell} \hat C^{\ell-1}`, no identity
    added, with the raw (un-normalised) layer maps :math:`C^{\ell}` (``raw=True``, GlobEnc's own
    code) or row-normalised ones. Each row of :math:`\hat C^{\ell}` is then divided by its sum
    (which changes no ranking within a row), so that the rows of every layer can share a colour
    scale. Row :math:`i` = receiving token, column :math:`j` = contributing token."""
    if isinstance(methods, str) or not len(methods):
        raise ValueError("methods must be a non-empty list of layer-wise method names.")
    methods = list(methods)
    bad = [m for m in methods if m not in core.METHODS or core.METHODS[m].kind != "layer"]
    if bad:
        raise ValueError(f"rollout_maps takes layer-wise methods; {bad} are not. Layer-wise: "
                         f"{[n for n, m in core.METHODS.items() if m.kind == 'layer']}.")
    if "input_ids" not in example or not len(example["input_ids"]):
        raise ValueError("example must hold non-empty 'input_ids' (see text_example).")
    ids = {"input_ids": [list(example["input_ids"])]}
    maps = core.context_mixing(bundle.model, bundle.tokenizer, ids, methods=methods, normalize=not raw)
    return {m: normalize_rows(rollout(maps[m], add_identity=False, normalize=not raw)) for m in methods}
