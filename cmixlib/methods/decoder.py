"""Context-mixing methods on pre-LN decoder LMs, exact and causal (notation of
:mod:`cmixlib.forward.decoder`: x_i resid_in, u_j = LN1(x_j), F_ij = sum_h alpha^h_ij f^h(x_j),
m_i = x_i + sum_j F_ij + b_O resid_mid, x'_i = m_i + MLP(LN2(m_i)) resid_out).

The layer maps are :mod:`cmixlib.methods.decoder_maps` (the functions an encoder runs, from
:mod:`cmixlib.methods.layer_math`, on a decoder's tensors); this module validates the options and
streams the layers (:func:`decoder_context_mixing`, to which :func:`cmixlib.context_mixing` routes
a decoder). Every map is (n, n), row i the receiving token, column j <= i the source; entries j > i are
exactly 0 (multiplied by the causal mask, so rounding can never leak above the diagonal).

- ``attention``: A_ij = (1/H) sum_h alpha^h_ij; ``attention_rollout`` rolls out 0.5 A + 0.5 I,
  rows normalised (Abnar & Zuidema 2020).
- ``attn_norm`` (N): ||F_ij||_2, f^h(x_j) = (u_j W_V^g(h) + b_V^g(h)) W_O^h read from the
  normalised input u_j = LN1(x_j) (a function of x_j alone: exact).
- ``attn_norm_res`` (N-Res): ||F_ij + delta_ij x_i||_2 (the residual adds the un-normalised x_i).
- ``alti_layer``: c_ij = max(0, ||m_i||_1 - ||m_i - z_ij||_1), z_ij = F_ij + delta_ij x_i, as
  Ferrando et al.'s decoder code (mt-upc/logit-explanations): y_i = m_i contains b_O, which is
  attributed to nobody, and LN1's beta and b_V travel inside f^h(x_j). ``alti`` rolls out the
  row-normalised c (no identity: the residual is in c).
- ``value_zeroing`` (Mohebbi et al. 2023): v_j zeroed in every key-value head (so every query
  head of a GQA group sees it zeroed), alpha unchanged; only layer l is recomputed:
  m_i^(not j) = m_i - F_ij, x'_i^(not j) = m^(not j) + MLP(LN2(m^(not j))), C_ij =
  distance(x'_i^(not j), x'_i) for every pair j <= i at once
  (:func:`cmixlib.methods.value_zeroing_decoder.value_zeroing_layer`).
- ``alti_logit`` (Ferrando et al. 2023): :mod:`cmixlib.methods.alti_logit` (the explanation with the
  embedding term, per-head terms and the unattributed remainder:
  :func:`~cmixlib.methods.alti_logit.explain_logit`).

N-ResLN, GlobEnc (N-Enc) and W-Res have no pre-LN counterpart (:data:`UNSUPPORTED`) and raise
:class:`UnsupportedMethodError`.

Conventions against the authors' code (read, not copied). ALTI and ALTI-Logit follow
mt-upc/logit-explanations: the affine per-source vector (``logit_attn_full``: LN1's beta and b_V
carried with alpha to source j; the linear-only ``simp`` variant is not offered), y_i = attention
+ residual with b_O, ``min_sum`` normalisation with the resultant's L1 norm (= max(0, .) / row
sum), layer l tracked by the ALTI rollout of layers 0..l-1, the MLP and bias terms kept apart.
Deliberate differences: every row i (their code explains the last position only); the L1
distance is exact (``F.pairwise_distance`` adds 1e-6 to the difference); RMSNorm final norms
are linearised without centring (their code knows LayerNorm models only). Value Zeroing follows
inseq's decoder implementation (0.7.1, read under transformers 4.53: all key-value heads of
token j zeroed, every layer zeroed independently from clean inputs, cosine distance, rows
normalised) with these differences, which no option removes yet: the distance is computed
stably (``0.5 |a/|a| - b/|b||^2``, not ``1 - cos``); at the last layer cmixlib compares the
block outputs before the final norm, inseq after it; inseq sets scores below 1e-5 to 0 and
leaves an all-zero row at zero, cmixlib keeps every score and normalises every row (so the BOS
row, whose only entry is its own, becomes [1]); layers are rolled out, not averaged.

Memory (streamed). The forward pass keeps, per layer, the captured (n, d) tensors and the
attention weights (H, n, n); the methods then visit the layers one at a time: the per-source
vectors F_ij (n x n x d per layer: 18 GB in float32 for SmolLM2 at n = 512 if all layers were
kept, as before) exist only as blocks of rows of
:data:`cmixlib.methods.decoder_maps.VECTOR_CHUNK_ELEMENTS` elements, and a
layer's derived tensors are released before the next
(:meth:`cmixlib.forward.decoder.DecoderLayerState.release`). Peak
memory beyond the model is therefore about L H n^2 attention weights plus the L n^2 maps of each
method plus one block (and Value Zeroing's chunk, :data:`cmixlib.methods.value_zeroing_decoder.CHUNK_ELEMENTS`);
time grows as n^2 per layer for the vector methods and as n^2 d d_ff for Value Zeroing. Measured
on SmolLM2 (``benchmarks/bench_decoder_memory.py``, results in ``benchmarks/README.md``): N,
N-Res, ALTI and ALTI-Logit together need about 0.25 GB beyond the model at n = 128 (1.4 GB
before streaming), 0.56 GB at n = 256 (5.1 GB before), 1.5 GB at n = 512 and 4.3 GB at
n = 1,024, and 2.3 s, 5.2 s, 18 s and 80 s of one CPU core.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from cmixlib.forward.decoder import run_decoder
from cmixlib.forward.decoder_checks import check_decoder_model
from cmixlib.forward.decoder_inputs import (TokenIds, decoder_bos, decoder_sentences,
                                            resolve_targets)
from cmixlib.forward.encoding import describe_model
from cmixlib.forward.prepare import per_sentence_rows, require_eval
from cmixlib.methods import aggregation
from cmixlib.methods.aggregation import normalize_rows
from cmixlib.methods.alti_logit import alti_logit
from cmixlib.methods.registry import ALL_METHODS
from cmixlib.methods.decoder_maps import (LAYER_FUNCTIONS, VECTOR_METHODS, decoder_head_maps,
                                          fixed_residual, vector_maps)
from cmixlib.methods.layer_math import check_head_methods
from cmixlib.methods.value_zeroing_decoder import (INSEQ_MIN_SCORE, inseq_normalize,
                                                   value_zeroing_layer)
from cmixlib.methods.vz_distances import check_standardize
from cmixlib.models.arch import decoder_final_norm, decoder_unembed
from cmixlib.result import MixingResult
from cmixlib.validation import InputError, check_bool, check_names, check_rows

__all__ = ["DECODER_METHOD_NAMES", "UNSUPPORTED", "UnsupportedMethodError",
           "check_decoder_method", "check_decoder_methods", "decoder_context_mixing",
           "last_layer_at"]

#: Methods of :data:`cmixlib.METHODS` (and ``alti_logit``) that decoders support.
DECODER_METHOD_NAMES = ("attention", "attention_rollout", "attention_flow", "attn_norm",
                        "attn_norm_res", "w_fixedres", "n_fixedres", "alti_layer", "alti",
                        "value_zeroing", "value_zeroing_rollout", "alti_logit")

_NO_POST_LN = ("in a pre-LN decoder LN1 normalises each token x_j before the value projection and "
               "the residual is added after attention with no LayerNorm on the sum, so there is "
               "no post-residual LayerNorm to decompose")
#: Methods with no exact pre-LN counterpart, and why.
UNSUPPORTED = {
    "attn_norm_res_ln": f"N-ResLN decomposes the LayerNorm applied to attention + residual; "
                        f"{_NO_POST_LN}. Use attn_norm_res (N-Res) or alti_layer.",
    "globenc_layer": f"GlobEnc's N-Enc decomposes the two post-residual LayerNorms (LN1, LN2); "
                     f"{_NO_POST_LN}. Use alti / alti_layer.",
    "globenc": f"GlobEnc rolls out N-Enc, which decomposes post-residual LayerNorms; "
               f"{_NO_POST_LN}. Use alti.",
    "w_res": f"W-Res mixes attention with the identity by N-Enc's context-mixing ratio; "
             f"{_NO_POST_LN}. Use w_fixedres.",
}


class UnsupportedMethodError(InputError):
    """A context-mixing method that has no exact counterpart on this kind of model (a
    ValueError, via :class:`~cmixlib.InputError`); the message says why."""


def check_decoder_method(name: str) -> None:
    """Raise :class:`UnsupportedMethodError` (with the reason) for :data:`UNSUPPORTED` names."""
    if name in UNSUPPORTED:
        raise UnsupportedMethodError(f"{name} is not defined for pre-LN decoders: "
                                     f"{UNSUPPORTED[name]}")


# --------------------------------------------------------------------------- entry point
def check_decoder_methods(methods, has_lm_head: bool) -> list[str]:
    """Validate names for a decoder: None = every supported method (``alti_logit`` only with an
    LM head); :data:`UNSUPPORTED` names raise :class:`UnsupportedMethodError` with the reason."""
    if methods is None:
        return [m for m in DECODER_METHOD_NAMES if has_lm_head or m != "alti_logit"]
    names = [methods] if isinstance(methods, str) else methods
    for name in names if isinstance(names, (list, tuple)) else []:
        if isinstance(name, str):
            check_decoder_method(name)
    return check_names(methods, DECODER_METHOD_NAMES, "methods", what="decoder method")


@torch.no_grad()
def _one_sentence(model, ids, methods, rows, options, targets=(None, None)
                  ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The maps of one unpadded sentence and the extras (``alti_logit``: its AltiLogit)."""
    cap = run_decoder(model, ids)
    n = len(ids)
    layer_names = {m for m in DECODER_METHOD_NAMES if ALL_METHODS[m].kind == "layer"}
    base = {m: ALL_METHODS[m].base for m in DECODER_METHOD_NAMES
            if ALL_METHODS[m].kind == "aggregated"}           # the registry's rolled-out maps
    need = {m for m in methods if m in layer_names} | {base[m] for m in methods if m in base}
    if "alti_logit" in methods:
        need.add("alti_layer")
    if "n_fixedres" in need:
        need.add("attn_norm")
    vec = [m for m in VECTOR_METHODS if m in need]
    raw: dict[str, list] = {name: [] for name in need}
    inseq = options.get("vz_convention") == "inseq"
    for layer, st in enumerate(cap.layers):  # streamed: one layer's derived tensors at a time
        last_norm = decoder_final_norm(model) if inseq and layer == len(cap.layers) - 1 \
            else None
        for name, m in vector_maps(st, vec).items() if vec else ():
            raw[name].append(m)
        for name in need:
            if name == "value_zeroing":
                raw[name].append(value_zeroing_layer(st, options["vz_distance"],
                                                     options["vz_standardize"],
                                                     options["vz_method"], last_norm,
                                                     options["vz_convention"]))
            elif name == "n_fixedres":
                raw[name].append(fixed_residual(raw["attn_norm"][-1]))
            elif name not in VECTOR_METHODS:
                raw[name].append(LAYER_FUNCTIONS[name](st))
        st.release()
    raw = {name: torch.stack(maps).cpu().numpy() for name, maps in raw.items()}

    def place(maps):
        if rows is None:
            return maps
        full = np.full_like(maps, np.nan)
        full[:, rows] = maps[:, rows]
        return full

    out, extras = {}, {}
    for name in methods:
        if name == "value_zeroing" and inseq:
            out[name] = place(inseq_normalize(raw[name]) if options["normalize"] else
                              np.where(raw[name] < INSEQ_MIN_SCORE, 0.0, raw[name]))
        elif name in layer_names:
            out[name] = place(normalize_rows(raw[name]) if options["normalize"] else raw[name])
        elif name == "attention_rollout":
            out[name] = aggregation.rollout(raw["attention"], add_identity=True)
        elif name == "attention_flow":
            flow = aggregation.attention_flow(raw["attention"], add_identity=True, rows=rows)
            out[name] = normalize_rows(np.nan_to_num(flow)) if rows is None else \
                place(normalize_rows(np.nan_to_num(flow)))
        elif name == "alti_logit":
            roll = aggregation.rollout(raw["alti_layer"].astype(np.float64), add_identity=False)
            res = alti_logit(cap, model, targets[0], targets[1], roll)
            # the map in the model's dtype like every other map; the explanation (extras)
            # keeps float64, in which its terms are summed and checked
            out[name] = place(res.tracked.astype(raw["alti_layer"].dtype))
            extras[name] = res
        else:
            norm = options["rollout_normalize"].get(name, True)
            out[name] = aggregation.rollout(raw[base[name]], add_identity=False, normalize=norm)
            if not norm:
                out[name] = normalize_rows(out[name])
    return out, extras


def last_layer_at(maps: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``maps`` (L, n, n) or per head (L, H, n, n) with the last layer's rows other than
    ``rows`` set to NaN (``final_rows``: the same NaN pattern as an encoder's)."""
    out = maps.astype(np.result_type(maps.dtype, np.float32), copy=True)
    other = np.setdiff1d(np.arange(maps.shape[-2]), rows)
    out[-1, ..., other, :] = np.nan
    return out


def _word_ids(tokenizer: Any, text: str | None, ids: torch.Tensor) -> list[int | None] | None:
    """Per token of ``ids`` (``text`` under the BOS rule) the index of its word, None for the
    BOS; None when unknown (ids given, a slow tokenizer, or pieces that do not line up)."""
    if text is None or not getattr(tokenizer, "is_fast", False):
        return None
    bos = decoder_bos(tokenizer)
    enc = tokenizer(text, add_special_tokens=bos is None)
    words = ([None] if bos is not None else []) + list(enc.word_ids())
    return words if len(words) == len(ids) else None


def decoder_context_mixing(model: torch.nn.Module, tokenizer: Any, text: Any,
                           methods: Sequence[str] | str | None, *, rows: Any = None,
                           final_rows: Any = None, heads: bool = False,
                           options: dict[str, Any]) -> MixingResult | list[MixingResult]:
    """:func:`cmixlib.context_mixing` for a pre-LN decoder (it dispatches here): a
    :class:`~cmixlib.result.MixingResult` per sentence (a list for a batch: a list of prompts,
    even of one, or ids of shape (B, n), B >= 2), name -> (L, n, n) array with the prompt's
    tokens, ids, words and layers; with ``alti_logit``, ``res.extras["alti_logit"]`` is its
    :class:`~cmixlib.methods.alti_logit.AltiLogit` (the logit, the per-layer and per-token
    terms, the embedding term, the remainder and the target and foil used per row). Rows i =
    receiving positions, columns
    j <= i, exactly 0 above the diagonal. Layer maps are row-normalised with ``normalize``;
    aggregated maps are rollouts as for encoders. ``alti_logit`` is in logit units (in the
    model's dtype, like every map; its float64 explanation is in the extras), never normalised: ``maps["alti_logit"][l, i, j]`` is layer l's attention contribution to the
    logit of ``AltiLogit(target=)`` (minus ``foil``'s) at row i, carried to input token j by
    the ALTI rollout of the layers below. Summed over l it is the attention part of the
    explanation only: the authors' ALTI-Logit adds the embedding term at column i, and the MLP
    and bias terms go to no token; :func:`explain_logit` returns all of them (the explanation,
    the remainder, per-head terms). ``AltiLogit(target=, foil=)``: ids or one-token strings
    (:mod:`cmixlib.forward.decoder_inputs`). ``ValueZeroing(convention=)``: ``"default"`` (block outputs compared
    at every layer; every row normalised by its sum) or ``"inseq"`` (inseq 0.7.1's outputs: the
    last layer compared after the final norm, 1 - cos taken in float32, distances below 1e-5
    set to 0, all-zero rows left at 0; cosine only; :mod:`cmixlib.methods.value_zeroing_decoder`). Text follows the BOS rule of
    :mod:`cmixlib.forward.decoder_inputs`. Each sentence is run alone (no padding enters the forward
    pass). Memory: the layers are streamed (:func:`_one_sentence`). ``heads=True``: per-head
    maps (L, H, n, n) (:func:`cmixlib.methods.decoder_maps.decoder_head_maps`).

    Examples
    --------
    >>> import numpy as np, torch, cmixlib
    >>> from cmixlib.forward.decoder import random_decoder
    >>> from cmixlib.methods.options import AltiLogit
    >>> model = random_decoder("llama")          # 3 layers, 6 query heads, 2 key-value heads
    >>> maps = cmixlib.context_mixing(model, None, {"input_ids": torch.arange(6)},
    ...                               ["alti", "value_zeroing", AltiLogit(target=3)])
    >>> maps["alti"].shape, bool(np.all(np.triu(maps["value_zeroing"], 1) == 0))
    ((3, 6, 6), True)
    """
    check_decoder_model(model)               # unlisted family or dtype: refused before a forward
    require_eval(model)
    has_head = hasattr(model, "lm_head")
    heads = check_bool(heads, "heads")       # per-head maps: cmixlib.methods.decoder_maps
    methods = check_decoder_methods(check_head_methods(methods) if heads else methods, has_head)
    options = dict(options, vz_standardize=check_standardize(
        options["vz_standardize"], model.get_input_embeddings().embedding_dim))
    if heads and options["vz_convention"] == "inseq":
        raise InputError("ValueZeroing(convention='inseq') has no per-head maps (inseq's "
                         "decoder Value Zeroing is per layer); use convention='default'.")
    seqs, is_batch = decoder_sentences(model, tokenizer, text)
    lengths = [len(s) for s in seqs]
    vocab = decoder_unembed(model).weight.shape[0] if has_head else 0
    logit = (options["logit_target"], options["logit_foil"])
    if not has_head and logit != (None, None):
        decoder_unembed(model)                     # raises the "no LM head" error
    targets = [resolve_targets(v, name, tokenizer, lengths, is_batch, vocab)
               for v, name in zip(logit, ("target", "foil"))]
    per_rows = per_sentence_rows(rows, len(seqs))
    per_rows = [check_rows(r, len(s), f"rows[{b}]" if r is not rows else "rows")
                for b, (r, s) in enumerate(zip(per_rows, seqs))]
    per_final = [check_rows(r, len(s), f"final_rows[{b}]" if r is not final_rows else
                            "final_rows")
                 for b, (r, s) in enumerate(zip(per_sentence_rows(final_rows, len(seqs),
                                                                   "final_rows"), seqs))]
    texts = [text] if isinstance(text, str) else \
        list(text) if isinstance(text, (list, tuple)) else [None] * len(seqs)
    results = []
    for s, r, last, t, f, prompt in zip(seqs, per_rows, per_final, *targets, texts):
        maps, extras = ((decoder_head_maps(model, s, methods, r, options), {}) if heads else
                        _one_sentence(model, s, methods, r, options, (t, f)))
        if last is not None:        # final_rows: the last layer read at these rows only
            maps = {m: last_layer_at(v, last) if m != "attention_flow" else v
                    for m, v in maps.items()}
        ids = [int(i) for i in s]
        results.append(MixingResult(
            maps, input_ids=ids, text=prompt, family="decoder", extras=extras,
            tokens=(tokenizer.convert_ids_to_tokens(ids)
                    if hasattr(tokenizer, "convert_ids_to_tokens") else None),
            word_ids=_word_ids(tokenizer, prompt, s), model=describe_model(model),
            options=dict(methods=methods, normalize=options["normalize"], heads=heads,
                         rows=None if r is None else r.tolist(),
                         final_rows=None if last is None else last.tolist())))
    return results if is_batch else results[0]
