"""The public entry point :func:`context_mixing`: one call, any context-mixing method of the
registry (:data:`METHODS`, from :mod:`cmixlib.methods.registry`), any supported model. It checks
the arguments and routes: an encoder's sentences to :mod:`cmixlib.methods.encoder_maps`, a pre-LN
decoder LM to :mod:`cmixlib.methods.decoder`; the method modules never import this one."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import torch

from cmixlib.forward.encoder import iter_sentences, layer_states, run_and_capture
from cmixlib.forward.encoding import TextInput, describe_model, encode_inputs, tokens
from cmixlib.forward.prepare import eval_encoder_layers, per_sentence_rows, unpack_model
from cmixlib.methods import norms
from cmixlib.methods.decoder import decoder_context_mixing
from cmixlib.methods.encoder_maps import sentence_head_maps, sentence_maps
from cmixlib.methods.layer_math import check_head_methods
from cmixlib.methods.options import (MixingMethod, method_options, refuse_moved_options,
                                     resolve_methods)
from cmixlib.methods.registry import ALL_METHODS, MIXING_KINDS, Method
from cmixlib.methods.vz_distances import check_standardize
from cmixlib.models.arch import is_decoder_lm
from cmixlib.result import MixingResult
from cmixlib.validation import InputError, check_bool, check_choice, check_names, check_rows


if TYPE_CHECKING:
    from cmixlib.models.loading import ModelBundle

#: The context-mixing methods of every supported model (from :mod:`cmixlib.methods.registry`, which also
#: holds the baselines).
METHODS: dict[str, Method] = {n: m for n, m in ALL_METHODS.items() if m.kind in MIXING_KINDS}
#: Context-mixing methods that only decoder LMs have (``alti_logit``: kind ``"logit"``);
#: :func:`context_mixing` computes them for a decoder, :func:`check_methods` accepts them.
DECODER_ONLY_METHODS: dict[str, Method] = {n: m for n, m in ALL_METHODS.items() if m.kind == "logit"}

#: Query rows: None (all), an int, or a list / array / tensor of ints (0-d tensors are ints); for
#: a batch also one such entry per sentence.
Rows = Union[None, int, Sequence[Any], np.ndarray, torch.Tensor]
#: ``methods``: None (all), a name or method object (:mod:`cmixlib.methods.options`), or a list
#: of them.
MethodSpec = Union[None, str, MixingMethod, Sequence[Union[str, MixingMethod]]]

def check_methods(methods: Sequence[str] | str | None) -> list[str]:
    """Validate method names: one name or a list of names of :data:`METHODS` or
    :data:`DECODER_ONLY_METHODS` (``alti_logit``; None = all of :data:`METHODS`).

    Raises
    ------
    TypeError
        ``methods`` is not a string, a list of strings or None.
    InputError
        ``methods`` is empty or holds an unknown name (the message lists the valid ones).

    Examples
    --------
    >>> from cmixlib import check_methods
    >>> check_methods("alti_layer")
    ['alti_layer']
    >>> check_methods(["alti", "alti_logit"])                # alti_logit: decoder LMs only
    ['alti', 'alti_logit']
    >>> len(check_methods(None)) == len(__import__("cmixlib").METHODS)
    True
    """
    if methods is None:
        return list(METHODS)
    return check_names(methods, {**METHODS, **DECODER_ONLY_METHODS}, "methods", what="method")


def context_mixing(model: torch.nn.Module | ModelBundle, tokenizer: Any, text: TextInput,
                   methods: MethodSpec = None, *, normalize: bool = True,
                   rows: Rows = None, final_rows: Rows = None, heads: bool = False,
                   **moved: Any) -> MixingResult | list[MixingResult]:
    r"""Context-mixing maps of every requested method for one text (or a batch of texts).

    Each layer-wise method gives one map per layer, :math:`C^{\ell}_{ij}` = how much token
    :math:`j` (column) contributes to token :math:`i` (row) at layer :math:`\ell`; e.g.
    ``attention`` :math:`A^{\ell} = \frac{1}{H}\sum_h \alpha^{\ell,h}`, ``attn_norm``
    :math:`\lVert F_{ij}\rVert`, ``attn_norm_res_ln`` :math:`\lVert T_i(x_j)\rVert`, ``alti_layer``
    :math:`c_{ij} = \max(0, \lVert y_i\rVert_1 - \lVert y_i - T_i(x_j)\rVert_1)`, ``value_zeroing``
    the distance between :math:`o_i` and :math:`o^{\neg j}_i`. With ``normalize`` the rows sum to 1,

    .. math:: C^{\ell}_{ij} \leftarrow C^{\ell}_{ij} \Big/ \sum_k C^{\ell}_{ik},

    and aggregated methods return the rollout :math:`\hat{C}^{\ell} = \tilde{C}^{\ell}\,
    \hat{C}^{\ell-1}` (:func:`rollout`, :func:`attention_flow`).

    Parameters
    ----------
    model, tokenizer:
        A Hugging Face BERT / RoBERTa / XLM-R / ELECTRA / DistilBERT / MPNet encoder (a
        ``torch.nn.Module``, base or with a head; eager or SDPA attention: an SDPA model runs
        eagerly for the captured pass only and is left as it was) or a pre-LN decoder LM, and its
        tokenizer (a callable Hugging Face tokenizer, or None for ids); or a
        :class:`~cmixlib.models.loading.ModelBundle` and None.
    text:
        A non-empty string, a non-empty list of non-empty strings (padded batch), or a mapping
        holding ``input_ids``: integers in ``0..vocab_size-1`` of shape (n,), (1, n) or (B, n)
        (list, array or tensor), with an optional ``attention_mask`` of the same shape holding
        only 0 (padding) and 1 (at least one 1 per row), and optional ``token_type_ids`` (a
        sentence pair's segments) and ``position_ids``, passed to the model as given: the
        mapping ``tokenizer(premise, hypothesis, return_tensors="pt")`` runs exactly as
        ``model(**enc)``; another key is refused. At most the model's maximum number of
        positions per sentence. **Returns a list** (one
        :class:`~cmixlib.result.MixingResult` per sentence) for a batch: a list of strings (even
        of one) or ids of shape (B, n) with B >= 2; one result for a string or one sequence of
        ids ((n,) or (1, n), what ``tokenizer(text, return_tensors="pt")``
        gives). Encoders and decoders alike.
    methods:
        A name, a method object, or a list of them, from :data:`METHODS` (None = all of
        them); a decoder LM also has ``alti_logit`` (:data:`DECODER_ONLY_METHODS`), which an
        encoder refuses. A method's options travel with it (:mod:`cmixlib.methods.options`):
        ``ValueZeroing(distance=, standardize=, implementation=, convention=)`` (also
        ``ValueZeroing("value_zeroing_rollout", ...)``), ``MixingMethod("globenc",
        normalize_layers=False)`` (GlobEnc's original raw rollout; also ``alti`` and
        ``value_zeroing_rollout``), ``AltiLogit(target=" are", foil=" is")``; a name is its
        method with the defaults. The old keywords (``vz_distance=`` ...) raise a TypeError
        that names the object to use.
    normalize:
        True or False: row-normalise layer-wise maps (rows sum to 1). Aggregated maps are always
        rollouts of row-normalised layer maps, without identity except
        ``attention_rollout``/``attention_flow``.
    rows:
        None (every row), or only these query rows (e.g. the [MASK] position): an int or a list,
        numpy array or tensor of integer positions ``0..n-1`` (repeats count once; no negative
        positions, floats or booleans; a 0-d tensor is an int, so ``[torch.tensor(0),
        torch.tensor(1)]`` means ``[0, 1]``), n counting the sentence's special tokens. Layer-wise
        maps get NaN in the other rows; aggregated maps still need (and compute) every row of
        their layer maps. For a batch, the same rows for every sentence, or a list of one entry
        per sentence (``[[3], [5], None]``) gives each sentence its own rows.
    final_rows:
        None, or (like ``rows``) the rows a caller reads in the **last** layer only (e.g. the
        [CLS] row of the final maps and rollouts): every map's last layer, and the last layer of
        every rollout, is computed at these rows and NaN in the others; the layers below stay
        whole (rollouts need them). Attention flow stays whole. The rows computed are the same
        numbers as without it; methods that cost :math:`n^2` rows per layer (Value Zeroing, ALTI)
        save a layer's worth of work. A decoder LM computes every row and returns the same
        NaN pattern (no work saved).
    heads:
        True: per-head layer maps (L, H, n, n) of ``attention``, ``attn_norm``, ``alti_layer``
        and ``value_zeroing`` (None = these four; definitions in
        :mod:`cmixlib.methods.layer_math` and the Value Zeroing modules); other methods are
        refused with the reason (aggregated ones stay per layer).
    Raises
    ------
    TypeError
        An argument of the wrong kind (``text`` None, bytes or a number; a tokenizer that is not
        callable; ``methods`` not names or method objects; ``normalize`` not a bool; a
        keyword that is now a method's option);
        :class:`~cmixlib.UnsupportedModelError` (a TypeError) for a model that is not a
        supported encoder.
    InputError
        A bad value: empty text, ids outside the vocabulary, a mask of another shape or with
        values other than 0/1, negative, fractional or out-of-range ``rows``, an unknown method or
        distance, a bad ``standardize``, a method asked twice, a text longer than the model
        accepts.

    Returns
    -------
    A :class:`~cmixlib.result.MixingResult`: a dict name -> float array (num_layers, n, n), row
    i = receiving token, column j = contributor, that also holds the sentence's ``text``,
    ``tokens``, ``input_ids``, ``word_ids``, ``layers``, the ``model``, its ``family`` and the
    ``options``, and can ``plot``, ``to_html`` (the explorer), ``save``, ``load`` and
    ``aggregate`` (words, layers); a list of them for a batch (see ``text``), encoders and
    decoders alike. A decoder's ``alti_logit`` puts its
    :class:`~cmixlib.methods.alti_logit.AltiLogit` (the logit, the embedding term, the
    remainder, the target and foil used) in ``res.extras["alti_logit"]``.
    ``maps["attention_rollout"]`` equals
    :func:`rollout` ``(maps["attention"])`` (identity added, the default of :func:`rollout` and
    :func:`attention_flow`); the other rollouts equal ``rollout(maps[base], add_identity=False)``
    of their layer-wise method (``normalize=True``).

    Examples
    --------
    >>> import torch, cmixlib
    >>> model = cmixlib.random_model("bert", layers=2)   # tiny and random: runs in a second
    >>> ids = {"input_ids": torch.tensor([[1, 5, 6, 7, 2]])}
    >>> maps = cmixlib.context_mixing(model, None, ids, ["alti_layer", "value_zeroing", "alti"])
    >>> maps["alti_layer"].shape                         # (layers, n, n)
    (2, 5, 5)
    >>> bool(abs(maps["alti"].sum(axis=-1) - 1).max() < 1e-5)   # rows sum to 1
    True

    With a pretrained model and text (``load_model`` falls back to the packaged model offline):

    >>> bundle = cmixlib.load_model()                    # doctest: +SKIP
    >>> maps = cmixlib.context_mixing(bundle, None, "The keys to the cabinet are here.")  # doctest: +SKIP
    """
    refuse_moved_options("context_mixing", moved)
    names, options = resolve_methods(methods)
    described = describe_model(model)
    model, tokenizer = unpack_model(model, tokenizer)
    heads = check_bool(heads, "heads")
    options["normalize"] = check_bool(normalize, "normalize")
    if names is not None:                    # unknown names: one error for every family
        check_methods(check_head_methods(names) if heads else names)
    if is_decoder_lm(model):                 # pre-LN decoders: cmixlib.methods.decoder
        got = decoder_context_mixing(model, tokenizer, text, names, rows=rows,
                                     final_rows=final_rows, heads=heads, options=options)
        for res in got if isinstance(got, list) else [got]:
            res.model = described
            res.options["method_options"] = method_options(methods, res.options["methods"])
        return got
    if options["logit_target"] is not None or options["logit_foil"] is not None:
        raise InputError("AltiLogit's target / foil are for decoder LMs (alti_logit) only.")
    if options["vz_convention"] != "default":
        raise InputError(f"ValueZeroing(convention={options['vz_convention']!r}) is for decoder "
                         "LMs (inseq's decoder Value Zeroing); encoders take "
                         "convention='default'.")
    names = check_methods(check_head_methods(names) if heads else names)
    decoder_only = [m for m in names if m in DECODER_ONLY_METHODS]
    if decoder_only:
        raise InputError(f"{decoder_only} need a decoder LM (Llama-style or GPT-2, with its LM "
                         f"head); {type(model).__name__} is an encoder: choose from "
                         f"{', '.join(METHODS)}.")
    mods = eval_encoder_layers(model)
    options["vz_standardize"] = check_standardize(options["vz_standardize"],
                                                  mods[0].ln2.normalized_shape[-1])
    enc = encode_inputs(model, tokenizer, text)
    lengths = enc.attention_mask.sum(dim=1).tolist()
    per_rows = per_sentence_rows(rows, len(lengths))
    per_rows = [check_rows(r, n, f"rows[{b}]" if r is not rows else "rows")
                for b, (r, n) in enumerate(zip(per_rows, lengths))]
    per_final = [check_rows(r, n, f"final_rows[{b}]" if r is not final_rows else "final_rows")
                 for b, (r, n) in enumerate(zip(per_sentence_rows(final_rows, len(lengths),
                                                                   "final_rows"), lengths))]
    asked = dict(methods=names, normalize=options["normalize"], heads=heads,
                 method_options=method_options(methods, names))
    capture = run_and_capture(model, enc.input_ids, enc.attention_mask, **enc.extras)
    sentences = iter_sentences(capture)
    texts = [text] if isinstance(text, str) else \
        list(text) if isinstance(text, (list, tuple)) else None
    results = []
    with torch.no_grad():
        for (b, keep), r, f in zip(enumerate(sentences), per_rows, per_final):
            maps = (sentence_head_maps if heads else sentence_maps)(mods, capture, b, keep,
                                                                    names, r, options, f)
            ids = enc.input_ids[b].cpu()[keep.cpu()]        # the host copy: ids and words only
            words = None if enc.word_ids is None else [enc.word_ids[b][int(i)] for i in keep]
            results.append(MixingResult(
                maps, input_ids=ids.tolist(), word_ids=words, model=described,
                text=None if texts is None else texts[b], family="encoder",
                tokens=(tokenizer.convert_ids_to_tokens(ids.tolist())
                        if hasattr(tokenizer, "convert_ids_to_tokens") else None),
                options=dict(asked, rows=None if r is None else r.tolist(),
                             final_rows=None if f is None else f.tolist())))
    return results if enc.is_batch else results[0]


def context_mixing_ratio(model: torch.nn.Module | ModelBundle, tokenizer: Any, text: TextInput,
                         kind: str = "attn_norm_res_ln") -> np.ndarray | list[np.ndarray]:
    r"""Context-mixing ratio per layer and token, (num_layers, n) (Kobayashi et al. 2021):
    r_i = ||sum_{j!=i} v_ij|| / (||sum_{j!=i} v_ij|| + ||v_ii||), v the vectors of ``kind``
    (``attn_norm_res``, ``attn_norm_res_ln`` (default) or ``globenc_layer``).

    .. math::

       r_i = \frac{\lVert \sum_{j \ne i} v_{ij} \rVert}
                  {\lVert \sum_{j \ne i} v_{ij} \rVert + \lVert v_{ii} \rVert},
       \qquad v_{ij} = z_{ij},\ T_i(x_j) \text{ or } T'_i(x_j).

    ``model``, ``tokenizer`` and ``text`` as in :func:`context_mixing` (and checked the same way);
    ``kind`` one of ``"attn_norm_res"``, ``"attn_norm_res_ln"``, ``"globenc_layer"``. Raises
    TypeError / :class:`InputError` as :func:`context_mixing`, and :class:`InputError` for an
    unknown ``kind``.

    Examples
    --------
    >>> import torch, cmixlib
    >>> model = cmixlib.random_model("bert", layers=2)
    >>> r = cmixlib.context_mixing_ratio(model, None, {"input_ids": torch.tensor([[1, 5, 6, 2]])})
    >>> r.shape                                          # (layers, n)
    (2, 4)
    >>> bool(((r >= 0) & (r <= 1)).all())
    True
    """
    model, tokenizer = unpack_model(model, tokenizer)
    kind = check_choice(kind, norms.MIXING_RATIO_VECTORS, "kind", what="mixing-ratio kind")
    mods = eval_encoder_layers(model)
    enc = encode_inputs(model, tokenizer, text)
    capture = run_and_capture(model, enc.input_ids, enc.attention_mask, **enc.extras)
    out = []
    with torch.no_grad():
        for b, keep in enumerate(iter_sentences(capture)):
            states = layer_states(capture, mods, b, keep)
            out.append(torch.stack([norms.mixing_ratio(st, kind) for st in states]).cpu().numpy())
    return out if enc.is_batch else out[0]
