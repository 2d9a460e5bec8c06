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

The model is never forked: weights are read from the modules, the layer input x and the attention
probabilities alpha are captured from one ordinary forward pass (eager attention), and
:meth:`LayerState.recompute_output` checks against the model's real output in the tests.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from .arch import LayerParts, UnsupportedModelError, layer_parts, position_offset
from .models import model_device

__all__ = ["LayerParts", "UnsupportedModelError", "encoder_layers", "max_positions", "Capture",
           "run_and_capture", "layer_output", "record_layer_calls", "layer_norm_scale",
           "layer_norm_linear", "LayerState", "iter_sentences", "layer_states"]


def encoder_layers(model: torch.nn.Module) -> list[LayerParts]:
    """The parts of every layer of a supported encoder (base model or any model with a head),
    located by :mod:`cmixlib.arch`; raises :class:`UnsupportedModelError` with an explanation
    for anything else (decoders, pre-LN models, unknown layouts)."""
    return layer_parts(model)


def max_positions(model: torch.nn.Module) -> int:
    """The longest input the model accepts (position embeddings minus reserved positions)."""
    n = getattr(model.config, "max_position_embeddings", 512)
    return int(n) - position_offset(model)


@dataclass
class Capture:
    """Everything one forward pass leaves behind: per-layer inputs, outputs and attentions."""

    inputs: list[torch.Tensor]        # x of each layer, (B, n, d)
    outputs: list[torch.Tensor]       # o of each layer, (B, n, d)
    attentions: list[torch.Tensor]    # alpha of each layer, (B, H, n, n)
    attention_mask: torch.Tensor      # (B, n) of 0/1


@torch.no_grad()
def run_and_capture(model: torch.nn.Module, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor | None = None, **forward_kwargs) -> Capture:
    """One ordinary forward pass with hooks that keep each layer's input and output.

    Attention probabilities come from ``output_attentions=True``; this needs eager attention
    (``attn_implementation="eager"``), which :func:`cmixlib.load_model` and
    :func:`cmixlib.random_model` request.
    """
    layers = encoder_layers(model)
    if getattr(model.config, "_attn_implementation", "eager") != "eager":
        try:
            model.set_attn_implementation("eager")
        except Exception as exc:  # pragma: no cover - depends on transformers internals
            raise UnsupportedModelError(
                "Attention weights need eager attention: load the model with "
                "attn_implementation='eager'.") from exc
    device = model_device(model)
    input_ids = input_ids.to(device)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    attention_mask = attention_mask.to(device)
    # the encoder alone: a task head (e.g. the MLM's vocabulary projection) is not needed here
    calls, outs, result = _forward_with_layer_hooks(model, input_ids, attention_mask, output_attentions=True,
                                                    **forward_kwargs)
    ins = [args[0] if args else kwargs["hidden_states"] for args, kwargs in calls]
    attentions = list(result.attentions)
    if len(attentions) != len(layers) or any(a is None for a in attentions):
        raise UnsupportedModelError("The model did not return attention weights; load it with attn_implementation='eager'.")
    return Capture(inputs=ins, outputs=outs, attentions=attentions, attention_mask=attention_mask)


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
                       attention_mask: torch.Tensor | None = None) -> list[tuple[tuple, dict, torch.Tensor]]:
    """One forward pass of the encoder (``model.base_model``) with hooks: for every layer module,
    the ``(args, kwargs)`` the model called it with and its output hidden states.

    Calling ``layer(h, *args[1:], **kwargs)`` then re-runs a layer exactly as the model does (masks
    and all), on other hidden states ``h`` (:mod:`cmixlib.gradients`, :mod:`cmixlib.hta`).
    """
    calls, outs, _ = _forward_with_layer_hooks(model, input_ids, attention_mask)
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
    n x n x d tensors are built (default: all).
    """

    mods: LayerParts
    x: torch.Tensor
    alpha: torch.Tensor
    o: torch.Tensor
    rows: torch.Tensor | None = None
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
        v = m.value(self.x)                                   # (n, H*dh), value bias included
        n, hd = v.shape
        dh = hd // H
        v = v.view(n, H, dh).transpose(0, 1)                  # (H, n, dh)
        w_o = m.out.weight.view(m.out.weight.shape[0], H, dh)  # (d, H, dh)
        return torch.einsum("hnk,dhk->hnd", v, w_o)

    def attn_vectors_for(self, rows: torch.Tensor) -> torch.Tensor:
        """F_ij = sum_h alpha^h_ij f^h(x_j) for the given rows i, shape (len(rows), n, d)."""
        a = self.alpha[:, rows, :]                            # (H, r, n)
        # batched over j: (n, r, H) @ (n, H, d) -> (n, r, d); contiguous operands make bmm
        # several times faster on CPU (same values)
        out = torch.bmm(a.permute(2, 1, 0).contiguous(),
                        self.head_vectors.transpose(0, 1).contiguous())
        return out.transpose(0, 1)                            # (r, n, d)

    @cached_property
    def attn_vectors(self) -> torch.Tensor:
        """F_ij for the selected rows (``rows``), shape (r, n, d)."""
        return self.attn_vectors_for(self.row_index)

    @cached_property
    def ln1_input(self) -> torch.Tensor:
        """p_i = sum_j F_ij + b_O + x_i for all rows (n, d)."""
        full = torch.einsum("hij,hjd->id", self.alpha, self.head_vectors)
        return full + self.mods.out.bias + self.x

    @cached_property
    def ln1_output(self) -> torch.Tensor:
        return self.mods.ln1(self.ln1_input)

    @cached_property
    def ln2_input(self) -> torch.Tensor:
        y = self.ln1_output
        m = self.mods
        return m.ffn_out(m.act(m.ffn_in(y))) + y

    def recompute_output(self) -> torch.Tensor:
        """o_i = LN2(FFN(y_i) + y_i) from the decomposition (tests compare it to the model)."""
        return self.mods.ln2(self.ln2_input)

    @cached_property
    def res_vectors(self) -> torch.Tensor:
        """z_ij = F_ij + delta_ij x_i (the residual placed on the diagonal), (r, n, d)."""
        z = self.attn_vectors.clone()
        r = self.row_index
        z[torch.arange(len(r), device=z.device), r] += self.x[r]
        return z

    @cached_property
    def ln1_vectors(self) -> torch.Tensor:
        """T_i(x_j) = gamma1 * (z_ij - mean(z_ij)) / sigma(p_i), sigma(p_i) = sqrt(Var(p_i) + eps1),
        (r, n, d).

        sum_j T_i(x_j) + gamma1 * (b_O - mean(b_O)) / sigma(p_i) + beta1 = LN1(p_i) exactly.
        """
        s = layer_norm_scale(self.mods.ln1, self.ln1_input[self.row_index])   # (r, 1)
        return layer_norm_linear(self.mods.ln1, self.res_vectors, s[:, None, :])

    @cached_property
    def ln2_vectors(self) -> torch.Tensor:
        """T'_i(x_j) = gamma2 * (T_i(x_j) - mean(T_i(x_j))) / sigma(u_i), sigma(u_i) =
        sqrt(Var(u_i) + eps2), u_i = y_i + FFN(y_i) (GlobEnc's N-Enc), (r, n, d).

        The FFN is not decomposed: it only enters through the real scale sigma(u_i) of the LN2 input.
        """
        s = layer_norm_scale(self.mods.ln2, self.ln2_input[self.row_index])
        return layer_norm_linear(self.mods.ln2, self.ln1_vectors, s[:, None, :])


def iter_sentences(capture: Capture) -> list[torch.Tensor]:
    """Positions of the real (unpadded) tokens of each sentence in a padded batch."""
    return [torch.nonzero(m, as_tuple=False).flatten() for m in capture.attention_mask.bool()]


def layer_states(capture: Capture, mods: list[LayerParts], b: int, keep: torch.Tensor,
                 rows: torch.Tensor | None = None) -> list[LayerState]:
    """The :class:`LayerState` of every layer for sentence ``b`` cropped to positions ``keep``.

    Cropping is exact: padded keys receive attention weight exactly 0 (the additive mask is the
    dtype's minimum), so the real tokens' computations never see padding.
    """
    return [LayerState(mods=m, x=capture.inputs[k][b, keep], o=capture.outputs[k][b, keep],
                       alpha=capture.attentions[k][b][:, keep][:, :, keep], rows=rows)
            for k, m in enumerate(mods)]
