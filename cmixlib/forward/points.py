"""Named capture points: every intermediate tensor of one forward pass under a name that says
where it sits in the math, one API for post-LN encoders and pre-LN decoders.

``cmixlib.capture(bundle, "The keys are here.")`` runs the model once on one sentence and
returns a :class:`SentenceCapture`; ``cap[l, "attn_out"]`` (or ``cap.layer(l)["attn_out"]``) is
layer ``l``'s tensor (0-based, one sentence, no batch dimension) and ``cap["embeddings"]`` a
model-level one. Names follow TransformerLens' hook points (``hook_resid_pre``,
``hook_attn_out``, ``hook_resid_mid``, ...), shortened; a name means the same math in both
families, and a family whose order of operations differs has the names its math needs.

**Post-LN encoders** (BERT, RoBERTa, ELECTRA, DistilBERT, MPNet; the notation of
:mod:`cmixlib.forward.encoder` and book/conventions.md), token i receiving from token j::

    resid_in      x_i                          layer input (hidden_states[l])          (n, d)
    attn_weights  alpha^h_ij                   softmax weights                          (H, n, n)
    values        v^h_j = x_j W_V^h + b_V^h    value vectors per head                   (H, n, d_h)
    mixed_values  head^h_i = sum_j alpha^h_ij v^h_j   each head's output before W_O     (H, n, d_h)
    head_out      f^h(x_j) = v^h_j W_O^h       (derived) head h's output per source     (H, n, d)
    attn_out      a_i = sum_j F_ij + b_O       attention block output (W_O's output)    (n, d)
    resid_mid     p_i = x_i + a_i              residual after attention = LN1 input     (n, d)
    ln1_in        (the same tensor as resid_mid: where it goes in a post-LN layer)
    ln1_out       y_i = LN1(p_i)               first LayerNorm's output                 (n, d)
    mlp_out       FFN(y_i)                     feed-forward output (W_2's output)       (n, d)
    ln2_in        u_i = y_i + FFN(y_i)         residual after the FFN = LN2 input       (n, d)
    resid_out     o_i = LN2(u_i)               layer output (next layer's resid_in)     (n, d)

model points: ``embeddings`` = o^0 = hidden_states[0], the first layer's resid_in (n, d);
``attn_mask``: the additive mask m_j that the layers add to the attention scores (0 for real
tokens, the dtype's minimum for padding), this sentence's row over all positions of the padded
batch it ran in, (n_batch,); None where the model passes no mask (one sentence, no padding).

**Pre-LN decoders** (:mod:`cmixlib.forward.decoder`, which owns them and writes its own symbols):
``resid_in``, ``ln1_out`` (LN1(x_i), *before* attention), ``attn_weights``, ``values``,
``head_out``, ``attn_out``, ``resid_mid`` (x_i + a_i, the LN2 input), ``ln2_out``, ``mlp_out``,
``resid_out`` (resid_mid + mlp_out); model points ``embeddings``, ``final_norm_in``,
``final_norm_out``, ``logits``.

Same name, same math: resid_in, attn_weights, values, head_out, attn_out, resid_mid (x + a),
mlp_out and resid_out (the layer output; post-LN normalises it, pre-LN does not). The norms sit
elsewhere, so ``ln1_out`` is "the output of the layer's first norm" in both (after attention in
an encoder, before it in a decoder), and only encoders have ``ln2_in`` (their u_i has no
residual name: it is never seen outside the layer) and ``mixed_values`` (TransformerLens'
``hook_z``).

The encoder's tensors are the model's own (forward hooks on its modules during the one pass of
:func:`cmixlib.forward.encoder.run_and_capture`), except ``head_out`` (derived from ``values`` and W_O);
each layer is a :class:`EncoderLayerState`, i.e. a :class:`~cmixlib.forward.encoder.LayerState` with its
decompositions (``ln1_vectors``, ...). :func:`edited` changes one point while the model runs (the
interventions of Value Zeroing and erasure) without hand-written hooks.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np
import torch

from cmixlib.models.arch import (FAMILIES, LayerParts, UnsupportedModelError, get_path, has_path,
                                 embedding_output_module, is_decoder_lm)
from cmixlib.forward.decoder import LAYER_POINTS as DECODER_LAYER_POINTS
from cmixlib.forward.decoder import MODEL_POINTS as DECODER_MODEL_POINTS
from cmixlib.forward.decoder import run_decoder
from cmixlib.forward.decoder_inputs import decoder_sentences
from cmixlib.forward.encoder import (LayerState, encoder_layers, iter_sentences, layer_output,
                                     layer_states, run_and_capture)
from cmixlib.forward.encoding import encode_inputs, tokens
from cmixlib.forward.prepare import eval_encoder_layers, require_eval, unpack_model
from cmixlib.validation import InputError

if TYPE_CHECKING:
    from cmixlib.forward.encoding import TextInput
    from cmixlib.models.loading import ModelBundle

__all__ = ["ENCODER_LAYER_POINTS", "ENCODER_MODEL_POINTS", "ENCODER_ALIASES",
           "DECODER_LAYER_POINTS", "DECODER_MODEL_POINTS", "EncoderLayerState",
           "SentenceCapture", "capture", "capture_encoder", "edited", "EDITABLE_POINTS",
           "text_and_tokenizer"]

#: Capture points of every encoder layer, in the order the forward pass meets them.
ENCODER_LAYER_POINTS = ("resid_in", "attn_weights", "values", "mixed_values", "head_out",
                        "attn_out", "resid_mid", "ln1_out", "mlp_out", "ln2_in", "resid_out")
#: Capture points of the whole encoder.
ENCODER_MODEL_POINTS = ("embeddings", "attn_mask")
#: Second names of encoder points (the LN1 input is the residual after attention).
ENCODER_ALIASES = {"ln1_in": "resid_mid"}
#: Encoder points :func:`edited` can change, and the :class:`~cmixlib.models.arch.LayerParts` module
#: whose output each one is (``resid_out``: the whole layer's).
EDITABLE_POINTS = {"values": "value", "attn_out": "out", "ln1_out": "ln1",
                   "mlp_out": "ffn_out", "resid_out": "layer"}
# captured by a hook on the output of a LayerParts module (mixed_values: W_O's input)
_HOOKED = {"attn_out": "out", "ln1_out": "ln1", "mlp_out": "ffn_out"}


@dataclass
class EncoderLayerState(LayerState):
    """A :class:`~cmixlib.forward.encoder.LayerState` that also holds the outputs of W_O, LN1 and the
    FFN from the forward pass, and reads every capture point by name: ``state["ln1_out"]``
    (module docstring). The decompositions (``attn_vectors``, ``ln1_vectors``, ...) are the
    parent's."""

    captured_attn_out: torch.Tensor | None = field(default=None, repr=False)
    captured_ln1_out: torch.Tensor | None = field(default=None, repr=False)
    captured_mlp_out: torch.Tensor | None = field(default=None, repr=False)
    captured_mixed_values: torch.Tensor | None = field(default=None, repr=False)

    def __getitem__(self, name: str) -> torch.Tensor:
        name = ENCODER_ALIASES.get(name, name)
        if name not in ENCODER_LAYER_POINTS:
            raise KeyError(f"Unknown encoder capture point {name!r}; layer points: "
                           f"{ENCODER_LAYER_POINTS} (and {tuple(ENCODER_ALIASES)}).")
        if name in _READ:
            return getattr(self, _READ[name])
        value = getattr(self, f"captured_{name}")
        if value is None:
            raise KeyError(f"{name!r} was not captured: build the state with cmixlib.capture "
                           "(or cmixlib.forward.points.capture_encoder).")
        return self._per_head(value) if name == "mixed_values" else value

    def _per_head(self, t: torch.Tensor) -> torch.Tensor:
        """(n, H d_h) with the heads side by side -> (H, n, d_h)."""
        return t.view(t.shape[0], self.mods.num_heads, -1).transpose(0, 1)

    @property
    def values(self) -> torch.Tensor:
        """v^h_j = x_j W_V^h + b_V^h per head, (H, n, d_h): the model's value projection."""
        v = self.captured_value if self.captured_value is not None else self.mods.value(self.x)
        return self._per_head(v)


# points that are LayerState attributes (the rest are the captured_* fields)
_READ = {"resid_in": "x", "attn_weights": "alpha", "values": "values",
         "head_out": "head_vectors", "resid_mid": "ln1_input", "ln2_in": "ln2_input",
         "resid_out": "o"}


@dataclass
class SentenceCapture:
    """One forward pass of one sentence, read by name (module docstring).

    ``cap[l, name]``: capture point ``name`` of layer ``l`` (0-based; negative counts from the
    last), the same as ``cap.layer(l)[name]``; ``cap[name]``: a model point. ``layers``: one
    state per layer (:class:`EncoderLayerState` or :class:`~cmixlib.forward.decoder.DecoderLayerState`,
    with their decompositions); ``kind``: ``"encoder"`` or ``"decoder"``; ``input_ids`` (n,);
    ``tokens``: the token strings where a tokenizer was given; ``raw``: the underlying
    :class:`~cmixlib.forward.encoder.Capture` or :class:`~cmixlib.forward.decoder.DecoderCapture`."""

    kind: str
    layers: list[Any]
    input_ids: torch.Tensor
    model_points: dict[str, torch.Tensor | None]
    tokens: list[str] | None = None
    raw: Any = field(default=None, repr=False)

    @property
    def layer_points(self) -> tuple[str, ...]:
        """The names ``cap[l, name]`` accepts."""
        if self.kind == "encoder":
            return ENCODER_LAYER_POINTS + tuple(ENCODER_ALIASES)
        return DECODER_LAYER_POINTS

    def __len__(self) -> int:
        return len(self.layers)

    def layer(self, l: int) -> Any:
        """The state of layer ``l`` (0-based), read by name: ``cap.layer(l)["attn_out"]``."""
        if not -len(self.layers) <= l < len(self.layers):
            raise IndexError(f"Layer {l} does not exist: the model has {len(self.layers)} "
                             f"layers (0 .. {len(self.layers) - 1}).")
        return self.layers[l]

    def __getitem__(self, key: str | tuple[int, str]) -> torch.Tensor | None:
        if isinstance(key, tuple):
            if len(key) != 2:
                raise KeyError(f"Use cap[layer, name] or cap[name]; got {key!r}.")
            l, name = key
            if name not in self.layer_points:
                raise KeyError(f"Unknown {self.kind} capture point {name!r}; layer points: "
                               f"{self.layer_points}.")
            return self.layer(l)[name]
        if key not in self.model_points:
            raise KeyError(f"Unknown {self.kind} model point {key!r}: {tuple(self.model_points)}"
                           " (layer points are read as cap[layer, name]).")
        return self.model_points[key]


@torch.no_grad()
def capture_encoder(model: torch.nn.Module, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor | None = None, **forward_kwargs: torch.Tensor
                    ) -> tuple[Any, list[list[EncoderLayerState]], list[dict]]:
    """One forward pass of a supported encoder on a (padded) batch with every capture point:
    :func:`cmixlib.forward.encoder.run_and_capture` plus hooks on W_O (its input and output), LN1, the
    FFN's W_2, the embedding module and the first layer's call (its additive mask). Returns
    ``(capture, states, model_points)``: the :class:`~cmixlib.forward.encoder.Capture` and, for each
    sentence, its :class:`EncoderLayerState` per layer (cropped to its real tokens) and its
    model points (:data:`ENCODER_MODEL_POINTS`). ``forward_kwargs`` (``token_type_ids``,
    ``position_ids``) go to the model's forward as given."""
    mods = encoder_layers(model)
    kept: dict[tuple[str, int], torch.Tensor] = {}
    handles = []

    def keep(name: str, k: int) -> Callable:
        def hook(module, args, out):
            kept[(name, k)] = layer_output(out)
        return hook

    def keep_in(k: int) -> Callable:
        def hook(mod, args):
            kept[("mixed_values", k)] = args[0]
        return hook

    def keep_mask(mod, args, kwargs):
        mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
        kept[("attn_mask", 0)] = mask if isinstance(mask, torch.Tensor) else None

    for k, m in enumerate(mods):
        handles += [getattr(m, part).register_forward_hook(keep(name, k))
                    for name, part in _HOOKED.items()]
        handles.append(m.out.register_forward_pre_hook(keep_in(k)))
    handles.append(embedding_output_module(model).register_forward_hook(keep("embeddings", 0)))
    handles.append(mods[0].layer.register_forward_pre_hook(keep_mask, with_kwargs=True))
    try:
        cap = run_and_capture(model, input_ids, attention_mask, **forward_kwargs)
    finally:
        for h in handles:
            h.remove()
    states, model_points = [], []
    mask = kept.get(("attn_mask", 0))
    batch, width = cap.attention_mask.shape
    for b, keep_pos in enumerate(iter_sentences(cap)):
        plain = layer_states(cap, mods, b, keep_pos)
        states.append([EncoderLayerState(
            **{f.name: getattr(st, f.name) for f in dataclasses.fields(st) if f.name != "_cache"},
            **{f"captured_{name}": kept[(name, k)][b, keep_pos]
               for name in (*_HOOKED, "mixed_values")})
            for k, st in enumerate(plain)])
        model_points.append({
            "embeddings": kept[("embeddings", 0)][b, keep_pos],
            "attn_mask": None if mask is None else mask.reshape(batch, -1, width)[b, 0]})
    return cap, states, model_points


def _is_text(value: Any) -> bool:
    """A text input of :func:`capture`: a string, a list of them, a mapping of ids, ids."""
    return isinstance(value, (str, list, tuple, Mapping, torch.Tensor, np.ndarray))


def _is_tokenizer(value: Any) -> bool:
    """A tokenizer: callable, with ``convert_ids_to_tokens``, and not a text input."""
    return callable(value) and hasattr(value, "convert_ids_to_tokens") and not _is_text(value)


def text_and_tokenizer(second: Any, third: Any) -> tuple[Any, Any]:
    """``(text, tokenizer)`` from :func:`capture`'s second and third arguments, in either order:
    ``(text, tokenizer)`` (capture's own order) or ``(tokenizer, text)`` (the order of
    :func:`cmixlib.context_mixing`), decided by type: a string, a list or tuple, a mapping, a
    tensor or an array is text; a tokenizer is callable and has ``convert_ids_to_tokens``.
    ``(None, text)`` (a :class:`~cmixlib.ModelBundle` without a tokenizer, as
    ``context_mixing(bundle, None, text)``) is text too.

    Raises :class:`~cmixlib.InputError` when the order cannot be decided: two texts, two
    tokenizers, or a tokenizer with no text.

    >>> text_and_tokenizer("The keys.", None)
    ('The keys.', None)
    >>> text_and_tokenizer(None, "The keys.")
    ('The keys.', None)
    """
    if _is_text(second) and (third is None or _is_tokenizer(third)):
        return second, third
    if (second is None or _is_tokenizer(second)) and _is_text(third):
        return third, second
    if _is_text(second) and _is_text(third):
        raise InputError("capture got two texts (its second and third arguments); pass "
                         "capture(model, text, tokenizer) or capture(model, tokenizer, text).")
    if _is_tokenizer(second) or _is_tokenizer(third):
        raise InputError("capture got a tokenizer but no text: pass capture(model, tokenizer, "
                         "text) (the order of context_mixing) or capture(model, text, "
                         "tokenizer).")
    return second, third            # neither is recognisable: checked (and refused) as text


def capture(model: torch.nn.Module | ModelBundle, text: TextInput | Any,
            tokenizer: Any = None) -> SentenceCapture | list[SentenceCapture]:
    """Run the model once on one sentence and return every capture point by name
    (:class:`SentenceCapture`; the tables of names are in this module's docstring). A list of
    texts (or ids of shape (B, n) with an ``attention_mask``) runs as one padded batch, as in
    :func:`cmixlib.context_mixing`, and gives one capture per sentence, cropped to its tokens
    (a decoder runs each sentence alone).

    ``model``: a :class:`~cmixlib.ModelBundle` or a supported encoder or decoder
    (``torch.nn.Module`` with eager attention, in eval mode); ``text``: a string or a list of
    strings (tokenised as :func:`cmixlib.context_mixing` does: the tokenizer's special tokens;
    for a decoder the BOS rule of :mod:`cmixlib.forward.decoder_inputs`) or a mapping with
    ``input_ids`` (and ``attention_mask``, ``token_type_ids``, ``position_ids``, passed to an
    encoder as given: a sentence pair's ``tokenizer(premise, hypothesis, return_tensors="pt")``
    gives ``model(**enc)``'s own tensors). ``tokenizer``: the model's tokenizer, or None (a
    bundle's own, or ids). The order of the last two is free: ``capture(model, text,
    tokenizer)`` and ``capture(model, tokenizer, text)`` (the order of
    :func:`cmixlib.context_mixing`; also ``capture(bundle, None, text)``) are the same call,
    told apart by type (:func:`text_and_tokenizer`: a string, list, mapping or tensor is text,
    a tokenizer has ``convert_ids_to_tokens``); two texts, two tokenizers or a tokenizer without
    text raise :class:`~cmixlib.InputError`. For an encoder, the decomposition
    of each layer is exact: e.g. ``cap[l, "resid_mid"] == cap[l, "resid_in"] +
    cap[l, "attn_out"]`` and ``einsum("hij,hjd->id", cap[l, "attn_weights"],
    cap[l, "head_out"]) + b_O == cap[l, "attn_out"]`` up to rounding.

    >>> import torch, cmixlib
    >>> cap = cmixlib.capture(cmixlib.random_model("bert", layers=2),
    ...                       {"input_ids": torch.tensor([1, 5, 6, 2])})
    >>> tuple(cap[1, "attn_weights"].shape), tuple(cap[0, "ln1_out"].shape)
    ((4, 4, 4), (4, 32))
    """
    text, tokenizer = text_and_tokenizer(text, tokenizer)
    model, tokenizer = unpack_model(model, tokenizer)
    if is_decoder_lm(model):
        require_eval(model)
        seqs, is_batch = decoder_sentences(model, tokenizer, text)
        caps = []
        for seq in seqs:
            dc = run_decoder(model, seq)
            caps.append(SentenceCapture(
                kind="decoder", layers=dc.layers, input_ids=dc.input_ids, raw=dc,
                model_points={name: dc[name] for name in DECODER_MODEL_POINTS},
                tokens=None if tokenizer is None else tokens(tokenizer, dc.input_ids)))
        return caps if is_batch else caps[0]
    eval_encoder_layers(model)
    enc = encode_inputs(model, tokenizer, text)
    ids, is_batch = enc.input_ids, enc.is_batch
    cap, states, points = capture_encoder(model, ids, enc.attention_mask, **enc.extras)
    caps = []
    for b, keep_pos in enumerate(iter_sentences(cap)):
        real = ids[b][keep_pos.to(ids.device)]
        caps.append(SentenceCapture(
            kind="encoder", layers=states[b], input_ids=real, raw=cap, model_points=points[b],
            tokens=None if tokenizer is None else tokens(tokenizer, real)))
    return caps if is_batch else caps[0]


def _point_module(layer: Any, point: str) -> torch.nn.Module:
    """The module whose output is encoder point ``point`` (:data:`EDITABLE_POINTS`) of ``layer``:
    a :class:`~cmixlib.models.arch.LayerParts`, an :class:`EncoderLayerState` or a bare layer module of
    a supported family (found by its layout)."""
    if point not in EDITABLE_POINTS:
        raise KeyError(f"{point!r} cannot be edited; editable encoder points: "
                       f"{tuple(EDITABLE_POINTS)}.")
    parts = layer.mods if isinstance(layer, LayerState) else layer
    if isinstance(parts, LayerParts):
        return getattr(parts, EDITABLE_POINTS[point])
    if point == "resid_out" and isinstance(layer, torch.nn.Module):
        return layer
    for fam in FAMILIES.values():
        if all(has_path(layer, path) for path in fam.layer.values()):
            return get_path(layer, fam.layer[EDITABLE_POINTS[point]])
    raise UnsupportedModelError(
        f"{type(layer).__name__} is not an encoder layer of a supported family: pass "
        "cmixlib.forward.encoder.encoder_layers(model)[l] or a layer state instead.")


@contextlib.contextmanager
def edited(layer: Any, point: str, fn: Callable[[torch.Tensor], torch.Tensor]
           ) -> Iterator[None]:
    """Inside the ``with`` block, every forward pass of ``layer`` replaces capture point
    ``point`` by ``fn(t)``, where ``t`` is that point as the module produces it (batch first;
    for ``values`` the heads concatenated, (B, n, H d_h)). ``fn`` must not change ``t`` in place.
    Value Zeroing of token j: ``edited(layer, "values", lambda v: v.index_fill(1, j, 0.0))``
    sets v^h_j = 0 in every head, bias included (``j`` a one-element index tensor)."""
    module = _point_module(layer, point)

    def hook(mod, args, out):
        if isinstance(out, (tuple, list)):
            return (fn(out[0]), *out[1:])
        return fn(out)

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
