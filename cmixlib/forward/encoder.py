"""Reading a post-LN encoder layer from outside: module adapters, one captured forward pass, and
the per-token decomposition every norm-, ALTI- and Value-Zeroing-style method is built on.

Notation for one layer (post-LN BERT family), token i receiving from token j, H heads (the book's
notation table, book/conventions.md, in ASCII)::

    x_i                                               layer input (hidden_states[l-1])
    v^h_j   = x_j W_V^h + b_V^h                      value vector of head h (value bias included)
    f^h(x_j) = v^h_j W_O^h                           value vector mapped by head h's slice of W_O
    F_ij    = sum_h alpha^h_ij f^h(x_j)               what j sends to i through attention
    a_i     = sum_j F_ij + b_O                        attention-block output
    p_i     = a_i + x_i                               LN1 input (residual added)
    y_i     = LN1(p_i)                                LN1 output
    u_i     = y_i + FFN(y_i)                          LN2 input
    o_i     = LN2(u_i)                                layer output (= next layer's input)
    z_ij    = F_ij + delta_ij x_i                     N-Res vector: p_i = sum_j z_ij + b_O
    T_i(x_j) = gamma1 * (z_ij - mean(z_ij)) / sigma(p_i)   N-ResLN / ALTI vector, share of y_i
    T'_i(x_j) = gamma2 * (T_i(x_j) - mean) / sigma(u_i)    N-Enc vector (through LN2)

with sigma(w) = sqrt(Var_d(w) + eps) the LayerNorm scale of a vector w.

Each tensor of one layer has a **capture point** name (:mod:`cmixlib.forward.points`, which reads them
from this module's forward pass; ``cmixlib.capture(bundle, text)[l, name]``), the same names as
:mod:`cmixlib.forward.decoder`'s where the math is the same::

    resid_in = x_i      attn_weights = alpha^h_ij    values = v^h_j    head_out = f^h(x_j)
    attn_out = a_i      resid_mid = ln1_in = p_i     ln1_out = y_i     mlp_out = FFN(y_i)
    ln2_in = u_i        resid_out = o_i              (model point) embeddings = o^0

The model is never forked: weights are read from the modules, the layer input x and the attention
probabilities alpha are captured from one ordinary forward pass (eager attention), and
:meth:`LayerState.recompute_output` checks against the model's real output in the tests.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterator

import torch

from cmixlib.forward import decomposition
from cmixlib.models.arch import LayerParts, UnsupportedModelError, layer_parts, position_offset
from cmixlib.models.devices import model_device

__all__ = ["LayerParts", "UnsupportedModelError", "encoder_layers", "max_positions", "Capture",
           "run_and_capture", "eager_attention", "layer_output", "record_layer_calls", "layer_norm_scale",
           "layer_norm_linear", "LayerState", "iter_sentences", "layer_states"]


def encoder_layers(model: torch.nn.Module) -> list[LayerParts]:
    """The parts of every layer of a supported encoder (base model or any model with a head),
    located by :mod:`cmixlib.models.arch`; raises :class:`UnsupportedModelError` with an explanation
    for anything else (decoders, pre-LN models, unknown layouts)."""
    return layer_parts(model)


def max_positions(model: torch.nn.Module) -> int:
    """The longest input the model accepts (position embeddings minus reserved positions)."""
    n = getattr(model.config, "max_position_embeddings", 512)
    return int(n) - position_offset(model)


@dataclass
class Capture:
    """Everything one forward pass leaves behind: per-layer inputs, outputs and attentions, and
    the value projections and the inputs of each layer's two LayerNorms (None where not
    captured)."""

    inputs: list[torch.Tensor]        # x of each layer, (B, n, d)
    outputs: list[torch.Tensor]       # o of each layer, (B, n, d)
    attentions: list[torch.Tensor]    # alpha of each layer, (B, H, n, n)
    attention_mask: torch.Tensor      # (B, n) of 0/1
    ln1_inputs: list[torch.Tensor] | None = None   # p of each layer, (B, n, d)
    ln2_inputs: list[torch.Tensor] | None = None   # u of each layer, (B, n, d)
    values: list[torch.Tensor] | None = None       # x W_V + b_V of each layer, (B, n, H*dh)


@torch.no_grad()
def run_and_capture(model: torch.nn.Module, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor | None = None, **forward_kwargs) -> Capture:
    """One ordinary forward pass with hooks that keep each layer's input and output, its value
    projection and the inputs p and u of its LayerNorms (the model's own values, so the
    decomposition need not recompute them: :attr:`LayerState.head_vectors`,
    :attr:`LayerState.ln1_input`, :attr:`LayerState.ln2_input`).

    ``forward_kwargs`` go to the encoder's forward as given (``token_type_ids``,
    ``position_ids``: :attr:`cmixlib.forward.encoding.Encoded.extras`), so the captured pass is the model's own.

    Attention probabilities come from ``output_attentions=True``; this needs eager attention
    (``attn_implementation="eager"``), which :func:`cmixlib.load_model` and
    :func:`cmixlib.random_model` request; a model loaded with another implementation (SDPA) runs
    eagerly for this pass only (:func:`eager_attention`) and is left as it was.
    """
    layers = encoder_layers(model)
    device = model_device(model)
    input_ids = input_ids.to(device)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    attention_mask = attention_mask.to(device)
    forward_kwargs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in forward_kwargs.items()}
    # the encoder alone: a task head (e.g. the MLM's vocabulary projection) is not needed here
    kept: dict[tuple[int, int], torch.Tensor] = {}
    handles = []
    for k, m in enumerate(layers):
        for which, ln in ((1, m.ln1), (2, m.ln2)):
            def keep_input(mod, args, k=k, which=which):
                if args and isinstance(args[0], torch.Tensor):
                    kept[(which, k)] = args[0]
            handles.append(ln.register_forward_pre_hook(keep_input))

        def keep_value(mod, args, out, k=k):
            if isinstance(out, torch.Tensor):
                kept[(0, k)] = out
        handles.append(m.value.register_forward_hook(keep_value))
    try:
        with eager_attention(model):
            calls, outs, result = _forward_with_layer_hooks(model, input_ids, attention_mask,
                                                            output_attentions=True, **forward_kwargs)
    finally:
        for h in handles:
            h.remove()
    ins = [args[0] if args else kwargs["hidden_states"] for args, kwargs in calls]
    attentions = list(result.attentions)
    if len(attentions) != len(layers) or any(a is None for a in attentions):
        raise UnsupportedModelError("The model did not return attention weights; load it with attn_implementation='eager'.")
    got = [[kept.get((which, k)) for k in range(len(layers))] for which in (0, 1, 2)]
    ok = [all(t is not None and t.shape[:-1] == ins[k].shape[:-1]
              and t.shape[-1] == (ins[k].shape[-1] if which else layers[k].value.out_features)
              for k, t in enumerate(lst)) for which, lst in enumerate(got)]
    got = [lst if good else None for lst, good in zip(got, ok)]
    return Capture(inputs=ins, outputs=outs, attentions=attentions, attention_mask=attention_mask,
                   values=got[0], ln1_inputs=got[1], ln2_inputs=got[2])


@contextmanager
def eager_attention(model: torch.nn.Module) -> Iterator[None]:
    """Inside the block the model uses eager attention (which returns attention weights); on exit
    its attention implementation is restored, so a model loaded with SDPA stays SDPA. The two
    compute the same function; only eager returns the weights."""
    before = getattr(model.config, "_attn_implementation", "eager")
    if before == "eager":
        yield
        return
    try:
        model.set_attn_implementation("eager")
    except Exception as exc:  # pragma: no cover - depends on transformers internals
        raise UnsupportedModelError(
            "Attention weights need eager attention: load the model with "
            "attn_implementation='eager'.") from exc
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def layer_output(out: Any) -> torch.Tensor:
    """The hidden states in a layer module's return value (a tensor, or a tuple that starts with it)."""
    return out[0] if isinstance(out, (tuple, list)) else out


def _forward_with_layer_hooks(model: torch.nn.Module, input_ids: torch.Tensor,
                              attention_mask: torch.Tensor | None, **forward_kwargs,
                              ) -> tuple[list[tuple[tuple, dict]], list[torch.Tensor], Any]:
    """One forward pass of the encoder (``model.base_model``) with hooks on every layer module:
    the ``(args, kwargs)`` each layer was called with, its output hidden states, and the result."""
    layers = [lm.layer for lm in encoder_layers(model)]
    calls: list[Any] = [None] * len(layers)
    outs: list[Any] = [None] * len(layers)
    handles = []
    for k, layer in enumerate(layers):
        def pre(mod, args, kwargs, k=k):
            calls[k] = (args, kwargs)

        def post(mod, args, kwargs, output, k=k):
            outs[k] = layer_output(output)

        handles.append(layer.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(layer.register_forward_hook(post, with_kwargs=True))
    try:
        result = model.base_model(input_ids=input_ids, attention_mask=attention_mask, **forward_kwargs)
    finally:
        for h in handles:
            h.remove()
    if any(c is None for c in calls):
        raise UnsupportedModelError("Not every encoder layer was called during the forward pass.")
    return calls, outs, result


@torch.no_grad()
def record_layer_calls(model: torch.nn.Module, input_ids: torch.Tensor,
                       attention_mask: torch.Tensor | None = None, **forward_kwargs
                       ) -> list[tuple[tuple, dict, torch.Tensor]]:
    """One forward pass of the encoder (``model.base_model``) with hooks: for every layer module,
    the ``(args, kwargs)`` the model called it with and its output hidden states.

    Calling ``layer(h, *args[1:], **kwargs)`` then re-runs a layer exactly as the model does (masks
    and all), on other hidden states ``h`` (:mod:`cmixlib.gradients`, :mod:`cmixlib.methods.hta`).
    ``forward_kwargs`` (``token_type_ids``, ``position_ids``) go to the encoder's forward.
    """
    calls, outs, _ = _forward_with_layer_hooks(model, input_ids, attention_mask, **forward_kwargs)
    return [(a, kw, o) for (a, kw), o in zip(calls, outs)]


def layer_norm_scale(module: torch.nn.LayerNorm, h: torch.Tensor) -> torch.Tensor:
    """sigma(h) = sqrt(Var_d(h) + eps) over the last dimension (biased variance, as LayerNorm uses)."""
    return torch.sqrt(h.var(dim=-1, unbiased=False, keepdim=True) + module.eps)


def layer_norm_linear(module: torch.nn.LayerNorm, v: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The linear part of a LayerNorm whose scale is frozen: gamma * (v - mean_d(v)) / scale.

    For any split h = sum_k v_k, LN(h) = sum_k layer_norm_linear(v_k, s) + beta with
    s = layer_norm_scale(h): this is the exact LayerNorm decomposition used by N-ResLN, ALTI and
    GlobEnc (each summand centred by its own mean, all divided by the real scale of h).
    """
    return module.weight * (v - v.mean(dim=-1, keepdim=True)) / scale


@dataclass
class LayerState:
    """One layer of one sentence (no padding), with the decomposition computed lazily.

    Shapes: x, o (n, d); alpha (H, n, n). ``rows`` restricts the query rows i for which the
    n x n x d tensors are built (default: all). ``captured_ln1_input`` / ``captured_ln2_input``:
    the LayerNorm inputs p and u (n, d) from the model's own forward pass
    (:func:`layer_states` passes them); where given, :attr:`ln1_input` / :attr:`ln2_input` are
    these values instead of being recomputed from the decomposition. ``captured_value``: the
    model's value projection x W_V + b_V (n, H*dh), used by :attr:`head_vectors` where given.
    """

    mods: LayerParts
    x: torch.Tensor
    alpha: torch.Tensor
    o: torch.Tensor
    rows: torch.Tensor | None = None
    captured_ln1_input: torch.Tensor | None = field(default=None, repr=False)
    captured_ln2_input: torch.Tensor | None = field(default=None, repr=False)
    captured_value: torch.Tensor | None = field(default=None, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def row_index(self) -> torch.Tensor:
        return self.rows if self.rows is not None else torch.arange(self.n, device=self.x.device)

    @cached_property
    def head_vectors(self) -> torch.Tensor:
        """f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h, shape (H, n, d)."""
        m = self.mods
        H = m.num_heads
        v = self.captured_value if self.captured_value is not None else m.value(self.x)
        # v: (n, H*dh), value bias included
        n, hd = v.shape
        dh = hd // H
        v = v.view(n, H, dh).transpose(0, 1)                  # (H, n, dh)
        w_o = m.out.weight.view(m.out.weight.shape[0], H, dh)  # (d, H, dh)
        return torch.einsum("hnk,dhk->hnd", v, w_o)

    def attn_vectors_for(self, rows: torch.Tensor) -> torch.Tensor:
        """F_ij = sum_h alpha^h_ij f^h(x_j) for the given rows i, shape (len(rows), n, d)."""
        return decomposition.attention_vectors(self.alpha[:, rows, :], self.head_vectors)

    @cached_property
    def attn_vectors(self) -> torch.Tensor:
        """F_ij for the selected rows (``rows``), shape (r, n, d)."""
        return self.attn_vectors_for(self.row_index)

    def recomputed_ln1_input(self) -> torch.Tensor:
        """p_i = sum_j F_ij + b_O + x_i for all rows (n, d), from the decomposition."""
        full = torch.einsum("hij,hjd->id", self.alpha, self.head_vectors)
        return full + self.mods.out.bias + self.x

    def recomputed_ln2_input(self, ln1_output: torch.Tensor | None = None) -> torch.Tensor:
        """u_i = y_i + FFN(y_i) for all rows (n, d), recomputed from the LN1 output y
        (default: :attr:`ln1_output`)."""
        y = self.ln1_output if ln1_output is None else ln1_output
        m = self.mods
        return m.ffn_out(m.act(m.ffn_in(y))) + y

    @cached_property
    def ln1_input(self) -> torch.Tensor:
        """p_i = sum_j F_ij + b_O + x_i for all rows (n, d): the model's own value where it was
        captured (``captured_ln1_input``), else :meth:`recomputed_ln1_input`."""
        if self.captured_ln1_input is not None:
            return self.captured_ln1_input
        return self.recomputed_ln1_input()

    @cached_property
    def ln1_output(self) -> torch.Tensor:
        return self.mods.ln1(self.ln1_input)

    @cached_property
    def ln2_input(self) -> torch.Tensor:
        """u_i = y_i + FFN(y_i) for all rows (n, d): the model's own value where it was captured
        (``captured_ln2_input``), else :meth:`recomputed_ln2_input`."""
        if self.captured_ln2_input is not None:
            return self.captured_ln2_input
        return self.recomputed_ln2_input()

    def recompute_output(self) -> torch.Tensor:
        """o_i = LN2(FFN(y_i) + y_i) from the decomposition (tests compare it to the model):
        p, y and u all recomputed, never the captured values."""
        y = self.mods.ln1(self.recomputed_ln1_input())
        return self.mods.ln2(self.recomputed_ln2_input(y))

    @cached_property
    def res_diag_vectors(self) -> torch.Tensor:
        """z_ii = F_ii + x_i for the selected rows i, (r, d): the only entries of z that differ
        from F."""
        r = self.row_index
        if "res_vectors" in self.__dict__:
            return self.res_vectors[torch.arange(len(r), device=r.device), r]
        return self.attn_vectors[torch.arange(len(r), device=r.device), r] + self.x[r]

    @cached_property
    def res_vectors(self) -> torch.Tensor:
        """z_ij = F_ij + delta_ij x_i (the residual placed on the diagonal), (r, n, d)."""
        r = self.row_index
        return decomposition.add_residual(self.attn_vectors.clone(), self.x[r], r)

    @cached_property
    def ln1_vectors(self) -> torch.Tensor:
        """T_i(x_j) = gamma1 * (z_ij - mean(z_ij)) / sigma(p_i), sigma(p_i) = sqrt(Var(p_i) + eps1),
        (r, n, d).

        sum_j T_i(x_j) + gamma1 * (b_O - mean(b_O)) / sigma(p_i) + beta1 = LN1(p_i) exactly.
        Computed from F (z without its diagonal), the diagonal from z_ii, so that z itself is
        never built (the same formula for every entry).
        """
        rr = self.row_index
        s = layer_norm_scale(self.mods.ln1, self.ln1_input[rr])               # (r, 1)
        t = _ln_linear(self.mods.ln1, self.attn_vectors, s[:, None, :])
        t[torch.arange(len(rr), device=t.device), rr] = _ln_linear(self.mods.ln1,
                                                                   self.res_diag_vectors, s)
        return t

    @cached_property
    def ln2_vectors(self) -> torch.Tensor:
        """T'_i(x_j) = gamma2 * (T_i(x_j) - mean(T_i(x_j))) / sigma(u_i), sigma(u_i) =
        sqrt(Var(u_i) + eps2), u_i = y_i + FFN(y_i) (GlobEnc's N-Enc), (r, n, d).

        The FFN is not decomposed: it only enters through the real scale sigma(u_i) of the LN2 input.
        """
        s = layer_norm_scale(self.mods.ln2, self.ln2_input[self.row_index])
        return _ln_linear(self.mods.ln2, self.ln1_vectors, s[:, None, :])


def _ln_linear(module: torch.nn.LayerNorm, v: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """:func:`layer_norm_linear` in a new tensor with one temporary fewer:
    (v - mean_d(v)) * (gamma / scale), the product formed in place."""
    return (v - v.mean(dim=-1, keepdim=True)).mul_(module.weight / scale)


def iter_sentences(capture: Capture) -> list[torch.Tensor]:
    """Positions of the real (unpadded) tokens of each sentence in a padded batch."""
    return [torch.nonzero(m, as_tuple=False).flatten() for m in capture.attention_mask.bool()]


def layer_states(capture: Capture, mods: list[LayerParts], b: int, keep: torch.Tensor,
                 rows: torch.Tensor | None = None) -> list[LayerState]:
    """The :class:`LayerState` of every layer for sentence ``b`` cropped to positions ``keep``.

    Cropping is exact: padded keys receive attention weight exactly 0 (the additive mask is the
    dtype's minimum), so the real tokens' computations never see padding.
    """
    ln1 = getattr(capture, "ln1_inputs", None)
    ln2 = getattr(capture, "ln2_inputs", None)
    val = getattr(capture, "values", None)
    sl = _as_slice(keep)

    def crop(t: torch.Tensor) -> torch.Tensor:      # (B, n, d) -> (len(keep), d), a copy
        return t[b, keep] if sl is None else t[b, sl].clone()

    def crop_alpha(a: torch.Tensor) -> torch.Tensor:
        return a[b][:, keep][:, :, keep] if sl is None else a[b, :, sl, sl].contiguous()

    return [LayerState(mods=m, x=crop(capture.inputs[k]), o=crop(capture.outputs[k]),
                       alpha=crop_alpha(capture.attentions[k]), rows=rows,
                       captured_ln1_input=None if ln1 is None else crop(ln1[k]),
                       captured_ln2_input=None if ln2 is None else crop(ln2[k]),
                       captured_value=None if val is None else crop(val[k]))
            for k, m in enumerate(mods)]


def _as_slice(keep: torch.Tensor) -> slice | None:
    """``keep`` as a slice when it is a run of consecutive positions (a padded sentence's real
    tokens), so cropping is a plain copy of a block; None otherwise."""
    if keep.ndim != 1 or keep.dtype == torch.bool or len(keep) == 0:
        return None
    start = int(keep[0])
    if start < 0:
        return None
    run = torch.arange(start, start + len(keep), device=keep.device, dtype=keep.dtype)
    return slice(start, start + len(keep)) if torch.equal(keep, run) else None
