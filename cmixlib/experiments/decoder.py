"""Context mixing in a decoder LM on BLiMP agreement (chapter 16): the Value Zeroing paper's cue
alignment and faithfulness against blank-out, adapted to a causal model, with the attention
sink measured in the same pass.

**The causal adaptation.** An annotated BLiMP pair (:func:`cmixlib.data.annotate_blimp`: words,
target word position, target/foil words, cue words) becomes, for a decoder, the good sentence's
words *before* the target, read after the BOS token: ``input_ids = [BOS] + ids(prefix)``. The
prediction position is the last token of the prefix, p = n - 1 (the token before the verb,
determiner or reflexive); its logits choose between the target and the foil, whose ids are the
**first tokens** of the target and foil words in context (``ids(prefix + " " + word)`` after
the prefix's ids). ALTI-Logit explains lambda_t - lambda_f at p: its layer-wise rows are each
layer's tracked attention terms, its global row the authors' explanation (summed over layers,
with the embedding term at p, :attr:`cmixlib.methods.alti_logit.AltiLogit.explanation`); the part
of the logit difference that no token receives (MLPs, biases) is reported beside it per example
(``logit_parts``: :meth:`~cmixlib.methods.alti_logit.AltiLogit.summary`). A pair is dropped, with its
reason, when a cue word does not precede the target (``cue_after_target``: in ``dna``/``dnaa``
the noun follows the determiner, so a causal model cannot see it), when the prefix's tokens
change once the next word is appended (``tokens_cross_words``), or when target and foil share
their first token (``same_first_token``, e.g. *dislike* / *dislike·s*).

Scores, per kept pair and method: the row p of each layer's map (cue alignment per layer:
dot, AP, probes needed, :func:`cmixlib.metrics.evaluation.alignment_rows`, against the cue tokens other
than those of the word at p, :func:`alignment_cues`: a map's share on p is its self share, not
evidence of finding the cue; a pair whose only cue word is the word at p, as in ``rpsv`` where
the subject noun is the word before the verb, is left out of the cue alignment with the reason
``cue_is_prediction_word``, and kept in the other evaluations; the alignment is reported
per paradigm and pooled over the paradigms left) and the row p of the last
layer's aggregated map (faithfulness: Spearman with blank-out). Blank-out for a decoder:
s^BO_j = Delta(w) - Delta(w without token j), Delta = lambda_t - lambda_f at the last
position, the token **deleted** (``blank="delete"``; a causal model has no [UNK] convention,
and SmolLM2's unknown token is its document separator) or replaced by the tokenizer's unknown
token (``blank="unk"``). The BOS token (position 0), where the decoder parks attention (the
*attention sink*), is left out of both evaluations and the rest renormalised by default
(``exclude="bos"``); ``also_exclude`` repeats both with other choices for comparison. The
batched passes (log-probabilities, blank-out): :mod:`cmixlib.experiments.decoder_scores`.
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from cmixlib.metrics import evaluation as ev
from cmixlib.metrics.statistics import correlation_table, spearman_to
from cmixlib.forward.batching import length_batches
from cmixlib.validation import InputError
from cmixlib.experiments.declaration import Experiment
from cmixlib.experiments.decoder_scores import (BLANK_MODES, blank_out_scores, causal_forward,
                                                sentence_logprobs)
from cmixlib.experiments.runner import Context
from cmixlib.experiments.sources import Sources, blimp_sample
from cmixlib.data import annotate_blimp
from cmixlib.gradients import random_scores
from cmixlib.methods.aggregation import rollout
from cmixlib.methods.alti_logit import explain_logit
from cmixlib.methods.dispatch import context_mixing
from cmixlib.models.loading import load_model
from cmixlib.models.smollm2 import decoder_bos_id

__all__ = ["DECODER_LAYER_METHODS", "DECODER_GLOBAL_METHODS", "SINK_METHODS", "EXCLUDE_MODES",
           "DecoderSources", "causal_example", "causal_examples", "sample_per_paradigm",
           "alignment_cues", "exclude_for", "DECODER_BLIMP"]

#: Layer-wise methods of the cue alignment (``alti_logit``: layer l's tracked contribution).
#: No nearness here: ``-|j - p|`` is never positive, so the alignment's normalisation (negatives
#: clipped) would make it uniform; it is a baseline of the faithfulness (ranks) only.
DECODER_LAYER_METHODS = ["random", "attention", "attn_norm", "attn_norm_res", "alti_layer",
                         "value_zeroing", "alti_logit"]
#: Aggregated methods of the faithfulness (last layer; ``alti_logit``: summed over layers).
DECODER_GLOBAL_METHODS = ["random", "nearness", "attention_rollout", "rollout:attn_norm",
                          "rollout:attn_norm_res", "alti", "value_zeroing_rollout", "alti_logit"]
#: Row-normalised maps whose share on the BOS column is reported per layer.
SINK_METHODS = ["attention", "attn_norm", "attn_norm_res", "alti_layer", "value_zeroing",
                "attention_rollout", "alti", "value_zeroing_rollout"]
#: Positions left out (and the rest renormalised): "none", "bos" (position 0).
EXCLUDE_MODES = ("none", "bos")
_MIXING = ["attention", "attention_rollout", "attn_norm", "attn_norm_res", "alti_layer", "alti",
           "value_zeroing", "value_zeroing_rollout"]       # ALTI-Logit: explain_logit
_BATCH = 16


# ============================================================================================
# Models and examples
# ============================================================================================
class DecoderSources(Sources):
    """:class:`Sources` of the decoder experiment: :meth:`decoder` (the run's ``decoder``
    setting through :func:`cmixlib.load_model`) and :meth:`blimp_pairs` (the encoder's BLiMP
    test half, :func:`blimp_sample` with the run's model, joined with the word-level annotation
    for the spaces between words). Tests override both with a random decoder and toy pairs."""

    def decoder(self) -> tuple[Any, dict | None]:
        return load_model(self._settings["decoder"]), None

    def blimp_pairs(self) -> list[dict]:
        """Annotated BLiMP agreement pairs (word level, with ``spaces``) of the test half that
        the chapter 9 runs use, in split order."""
        encoder = load_model(self._model)
        spaces = {(r["uid"], r["pair_id"]): r["spaces"]
                  for r in annotate_blimp(progress=False) if r["drop_reason"] is None}
        return [dict(ex, spaces=spaces[ex["uid"], ex["pair_id"]])
                for ex in blimp_sample(encoder, None)]


def sample_per_paradigm(pairs: Sequence[dict], limit: int | None, seed: int = 0) -> list[dict]:
    """At most ``limit`` pairs of each paradigm (``uid``), a seeded random sample
    (``numpy.random.default_rng(seed)``, paradigms in order of first appearance), kept in the
    input order; ``limit`` None keeps every pair."""
    if limit is None:
        return list(pairs)
    rng = np.random.default_rng(seed)
    keep: set[int] = set()
    for uid in dict.fromkeys(p["uid"] for p in pairs):
        idx = [i for i, p in enumerate(pairs) if p["uid"] == uid]
        keep.update(idx if len(idx) <= limit else rng.choice(idx, limit, replace=False).tolist())
    return [p for i, p in enumerate(pairs) if i in keep]


def _join(words: Sequence[str], spaces: Sequence[bool]) -> str:
    return "".join(w + (" " if s else "") for w, s in zip(words, spaces)).rstrip(" ")


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def causal_example(pair: Mapping, tokenizer, bos_id: int) -> tuple[dict | None, str | None]:
    """``(example, None)`` or ``(None, drop_reason)`` for one annotated pair (module docstring).

    The example has ``input_ids`` ([BOS] + the prefix's ids), ``target_index`` = p = n - 1 (the
    prediction position), ``target_id`` / ``foil_id`` (first tokens of the words in context),
    ``cue_indices`` (every token of every cue word, shifted by the BOS),
    ``prediction_word_indices`` (the tokens of the word that ends at p), ``tokens`` and the
    pair's ``uid``, ``pair_id``, ``label``, ``words``, ``target_word``, ``foil_word``."""
    words, spaces = list(pair["words"]), list(pair["spaces"])
    ti = int(pair["target_word_index"])
    cues = [int(c) for c in pair["cue_word_indices"]]
    if ti == 0:
        return None, "no_context"
    if not cues or max(cues) >= ti:
        return None, "cue_after_target"
    bounds = [0]
    prefix: list[int] = []
    for k in range(1, ti + 1):                   # ids of words[:k]; each must extend the last
        ids = _ids(tokenizer, _join(words[:k], spaces[:k]))
        if ids[:len(prefix)] != prefix:
            return None, "tokens_cross_words"
        prefix = ids
        bounds.append(len(ids))
    first = []
    for word in (pair["target_word"], pair["foil_word"]):
        ids = _ids(tokenizer, _join(words[:ti] + [word], spaces[:ti] + [False]))
        if ids[:len(prefix)] != prefix or len(ids) == len(prefix):
            return None, "tokens_cross_words"
        first.append(ids[len(prefix)])
    if first[0] == first[1]:
        return None, "same_first_token"
    input_ids = [int(bos_id)] + prefix
    cue_idx = sorted(1 + k for c in cues for k in range(bounds[c], bounds[c + 1]))
    tokens = (tokenizer.convert_ids_to_tokens(input_ids)
              if hasattr(tokenizer, "convert_ids_to_tokens") else [str(i) for i in input_ids])
    ex = {k: pair[k] for k in ("uid", "pair_id", "label", "words", "target_word", "foil_word")
          if k in pair}
    ex.update(input_ids=input_ids, target_index=len(input_ids) - 1, target_id=int(first[0]),
              foil_id=int(first[1]), cue_indices=cue_idx, tokens=list(tokens),
              prediction_word_indices=[1 + k for k in range(bounds[ti - 1], bounds[ti])])
    return ex, None


def alignment_cues(example: Mapping) -> list[int]:
    """The cue positions the cue alignment scores: ``cue_indices`` without the word at the
    prediction position p (``prediction_word_indices``; p alone when absent), module
    docstring; empty when the only cue word is the word at p (its other tokens are p's own
    word, not a cue found elsewhere)."""
    p = int(example["target_index"])
    own = {int(k) for k in example.get("prediction_word_indices", [p])} | {p}
    return [int(c) for c in example["cue_indices"] if int(c) not in own]


def causal_examples(pairs: Sequence[Mapping], tokenizer,
                    bos_id: int) -> tuple[list[dict], pd.DataFrame]:
    """:func:`causal_example` of every pair: the kept examples and a frame (uid, reason, pairs)
    counting the pairs kept (reason "kept") and dropped per reason."""
    kept, rows = [], []
    for pair in pairs:
        ex, reason = causal_example(pair, tokenizer, bos_id)
        rows.append((pair["uid"], reason or "kept"))
        if ex is not None:
            kept.append(ex)
    counts = (pd.DataFrame(rows, columns=["uid", "reason"]).value_counts(sort=False)
              .rename("pairs").reset_index())
    return kept, counts


# ============================================================================================
# The experiment
# ============================================================================================
def exclude_for(mode: str) -> list[int] | None:
    """Positions left out for ``mode`` (:data:`EXCLUDE_MODES`): None or [0] (the BOS)."""
    if mode not in EXCLUDE_MODES:
        raise InputError(f"exclude must be one of {EXCLUDE_MODES}, not {mode!r}.")
    return None if mode == "none" else [0]


def _scores(maps: Mapping[str, np.ndarray], ex: Mapping, L: int, seed: int,
            explanation: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(layer-wise rows (L, n), global rows (n,)) at p for every method of the two lists;
    ``explanation``: ALTI-Logit's explanation row at p (with the embedding term)."""
    p, n = int(ex["target_index"]), len(ex["input_ids"])
    near = -np.abs(np.arange(n) - p).astype(float)
    layer = {m: maps[m][:, p, :] for m in DECODER_LAYER_METHODS if m in maps}
    layer["random"] = random_scores(n, seed=seed, num_layers=L)
    glob = {m: maps[m][-1, p, :] for m in ("attention_rollout", "alti", "value_zeroing_rollout")}
    for base in ("attn_norm", "attn_norm_res"):
        glob[f"rollout:{base}"] = rollout(maps[base], add_identity=False, normalize=True)[-1, p]
    glob["alti_logit"] = np.asarray(explanation, dtype=np.float64)
    glob["random"] = random_scores(n, seed=seed)
    glob["nearness"] = near
    return layer, glob


def decoder_blimp(ctx: Context) -> dict[str, pd.DataFrame]:
    """Chapter 16's run on the decoder named by the ``decoder`` setting (module docstring).

    Pairs: the BLiMP agreement test half of the run's model (chapter 9's pairs), at most
    ``limit`` per paradigm (seeded, :func:`sample_per_paradigm`). Frames: ``accuracy`` (per
    paradigm: the share of pairs whose good sentence has the higher sum of log-probabilities
    after BOS, all five paradigms; and, on the pairs kept for the causal evaluation, the share
    with lambda_t > lambda_f at p); ``result`` (cue alignment per exclude mode, method, layer,
    metric: mean, std, n, pooled over the paradigms whose pairs have a cue other than p);
    ``result_by_paradigm`` (the same per ``uid``); ``alignment_drops`` (per paradigm, the
    pairs left out of the cue alignment and why, :func:`alignment_cues`); ``faithfulness`` (Spearman of each method's global row at p with
    blank-out per example, mean/std/n per exclude mode); ``sink_norm`` (per layer input l:
    mean over examples of ||x_0|| at the BOS and of the mean ||x_j||, j >= 1, and of their
    ratio); ``sink_share`` (per method of :data:`SINK_METHODS` and layer: the mean share of a
    row i >= 1 on the BOS column); ``drops`` (pairs kept and dropped per paradigm and
    reason)."""
    s = ctx.settings
    if s["blank"] not in BLANK_MODES:
        raise InputError(f"blank must be one of {BLANK_MODES}, not {s['blank']!r}.")
    modes = [s["exclude"], *[m for m in s["also_exclude"] if m != s["exclude"]]]
    for m in modes:
        exclude_for(m)
    src = ctx.sources if isinstance(ctx.sources, DecoderSources) else \
        DecoderSources().bind(ctx.spec, ctx.note)
    bundle, _ = src.decoder()
    model, tok = bundle.model, bundle.tokenizer
    ctx.describe_models([(None, bundle, None)])
    ctx._devices.add(str(next(model.parameters()).device))
    bos = getattr(bundle, "bos_token_id", None)
    if bos is None:
        bos = decoder_bos_id(tok)
    if bos is None:
        raise InputError("The decoder's tokenizer has no <|endoftext|> or BOS token to start "
                         "each text with; give its bundle a bos_token_id.")
    pad = getattr(tok, "pad_token_id", None)
    pad = bos if pad is None else pad
    pairs = sample_per_paradigm(src.blimp_pairs(), ctx.limit, s["seed"])
    timing: dict[str, float] = {}
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    good = [[bos] + _ids(tok, p["sentence_good"]) for p in pairs]
    bad = [[bos] + _ids(tok, p["sentence_bad"]) for p in pairs]
    lp = sentence_logprobs(model, good + bad, pad)
    wins = pd.DataFrame({"uid": [p["uid"] for p in pairs],
                         "win": lp[:len(pairs)] > lp[len(pairs):]})
    timing["sentence_logprobs_s"] = time.perf_counter() - t0

    examples, drops = causal_examples(pairs, tok, bos)
    ctx.info["data_size"] = {"pairs": len(pairs), "causal": len(examples)}
    t0 = time.perf_counter()
    bo = blank_out_scores(model, examples, s["blank"], unk_id=getattr(tok, "unk_token_id", None),
                          pad_id=pad)
    timing["blank_out_s"] = time.perf_counter() - t0

    align, rho, share, norms, right, parts = [], {m: {} for m in modes}, [], [], [], []
    cue_kept: list[tuple[str, str]] = []
    t0 = time.perf_counter()
    L = None
    for idx in ctx.tqdm(length_batches([len(e["input_ids"]) for e in examples], _BATCH),
                        desc="decoder maps"):
        batch = [examples[i] for i in idx]
        res, _, _, column = causal_forward(model, [e["input_ids"] for e in batch], pad,
                                     positions=[int(e["target_index"]) for e in batch],
                                     output_hidden_states=True)
        for b, (i, ex) in enumerate(zip(idx, batch)):
            n, p = len(ex["input_ids"]), int(ex["target_index"])
            hs = torch.stack(res.hidden_states[:-1])[:, b, :n].double()      # (L, n, d) inputs
            L = hs.shape[0]
            nrm = hs.norm(dim=-1).cpu().numpy()
            norms += [{"example": i, "layer": l, "bos": nrm[l, 0], "others": nrm[l, 1:].mean()}
                      for l in range(L)]
            lg = res.logits[b, column[p]]
            right.append({"uid": ex["uid"], "win": bool(lg[ex["target_id"]] > lg[ex["foil_id"]])})
            ids = {"input_ids": torch.tensor(ex["input_ids"])}
            maps = context_mixing(model, None, ids, methods=_MIXING)
            lg = explain_logit(model, None, ids, ex["target_id"], ex["foil_id"])
            maps["alti_logit"] = lg.tracked
            parts.append({"example": i, "uid": ex["uid"], **lg.summary(p)})
            share += [{"example": i, "method": m, "layer": l,
                       "share": float(maps[m][l, 1:, 0].mean())}
                      for m in SINK_METHODS for l in range(L)]
            layer, glob = _scores(maps, ex, L, int(s["seed"]) * 100003 + i,
                                  lg.explanation[p])
            cues = alignment_cues(ex)
            cue_kept.append((ex["uid"], "kept" if cues else "cue_is_prediction_word"))
            for mode in modes:
                if cues:
                    align += [dict(r, exclude=mode, uid=ex["uid"]) for r in ev.alignment_rows(
                        layer, cues, example_id=i, exclude=exclude_for(mode), ties=s["ties"])]
                rho[mode][i] = spearman_to(bo[i], glob, exclude=exclude_for(mode))
    timing["maps_s"] = time.perf_counter() - t0
    timing["cpu_s"] = time.process_time() - cpu0       # this process's CPU time (wall: shared)
    ctx.info["timing"] = {k: round(v, 2) for k, v in timing.items()}

    acc = wins.groupby("uid", sort=False)["win"].agg(sentence_accuracy="mean", pairs="count")
    cue = pd.DataFrame(right, columns=["uid", "win"]).groupby("uid", sort=False)["win"]
    acc = acc.join(cue.agg(prediction_accuracy="mean", causal_pairs="count")).reset_index()
    cols = ["example", "method", "layer", *ev.ALIGNMENT_METRICS, "exclude", "uid"]
    align_df = pd.DataFrame(align, columns=cols)
    agg = ev.aggregate_alignment(align_df, by=("exclude", "method", "layer"))
    by_paradigm = ev.aggregate_alignment(align_df, by=("exclude", "uid", "method", "layer"))
    alignment_drops = (pd.DataFrame(cue_kept, columns=["uid", "reason"]).value_counts(sort=False)
                       .rename("pairs").reset_index())
    faith = pd.concat([correlation_table({m: [r[i][m] for i in sorted(r)]
                                             for m in DECODER_GLOBAL_METHODS}, exclude=mode)
                       for mode, r in rho.items()], ignore_index=True)
    nf = pd.DataFrame(norms, columns=["example", "layer", "bos", "others"])
    sink_norm = nf.assign(ratio=nf.bos / nf.others).groupby("layer")[
        ["bos", "others", "ratio"]].mean().reset_index()
    sink_share = (pd.DataFrame(share, columns=["example", "method", "layer", "share"])
                  .groupby(["method", "layer"], sort=False)["share"].mean().reset_index())
    return {"result": agg, "accuracy": acc, "faithfulness": faith, "sink_norm": sink_norm,
            "sink_share": sink_share, "drops": drops, "logit_parts": pd.DataFrame(parts),
            "result_by_paradigm": by_paradigm, "alignment_drops": alignment_drops}


def _summary(frames) -> str:
    acc = frames["accuracy"]
    res = frames["result"]
    dot = res[(res.metric == "dot")].groupby(["exclude", "method"], sort=False)["mean"].mean()
    faith = frames["faithfulness"].set_index(["exclude", "method"])["mean"]
    parts = frames.get("logit_parts", pd.DataFrame({"remainder_share": []}))
    share = float(parts["remainder_share"].mean()) if len(parts) else float("nan")
    return (f"ALTI-Logit: mean share of the logit difference left to MLPs and biases: "
            f"{share:.3f}\n\naccuracy per paradigm:\n{acc.to_string()}\n\nmean dot over layers:\n"
            f"{dot.unstack('exclude').to_string(float_format=lambda v: f'{v:.3f}')}\n\n"
            f"faithfulness (mean Spearman):\n"
            f"{faith.unstack('exclude').to_string(float_format=lambda v: f'{v:.3f}')}")


DECODER_BLIMP = Experiment(
    name="decoder-blimp",
    title="A decoder LM on BLiMP agreement: attention sink, causal cue alignment, faithfulness",
    paper="beyond the papers (Value Zeroing §5 and §7 adapted to a causal LM; ALTI-Logit)",
    compute=decoder_blimp,
    defaults={"decoder": "smollm2", "exclude": "bos", "also_exclude": ["none"],
              "blank": "delete", "ties": "optimistic", "seed": 0},
    summary=_summary)
