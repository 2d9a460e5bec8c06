"""Reading a pre-LN decoder LM from outside: one captured forward pass with named capture points,
and the per-source decomposition of each layer's attention block.

Notation for one layer of a pre-LN decoder (a family of :data:`cmixlib.models.arch.DECODER_FAMILIES`),
token i receiving from token j <= i, H query heads sharing KV key-value heads (query head h reads
key-value head g(h) = h // (H / KV)), r the residual multiplier (1 except Granite). Each name in
the first column is a **capture point**: ``state[name]`` on a :class:`DecoderLayerState` (``capture.layers[l][name]``),
the model's own tensor from one ordinary forward pass, or derived from those where marked::

    resid_in      x_i                         layer input (the residual stream)       (n, d)
    ln1_out       u_i = LN1(x_i)              normalised input (RMSNorm or LayerNorm)  (n, d)
    attn_weights  alpha^h_ij                  softmax weights, causal (0 for j > i)   (H, n, n)
    values        v^h_j = u_j W_V^g(h) + b_V^g(h)   values per query head, GQA expanded (H, n, d_h)
    head_out      f^h(x_j) = r v^h_j W_O^h    (derived) head h's write per source    (H, n, d)
    attn_out      a_i                         attention block output, r a_i =        (n, d)
                  sum_j F_ij + r b_O, F_ij = sum_h alpha^h_ij f^h(x_j)   (``attn_vectors``)
    resid_mid     m_i = x_i + r a_i           residual after attention                (n, d)
    ln2_out       w_i = LN2(m_i)              normalised MLP input                     (n, d)
    mlp_out       g_i = MLP(w_i)              gated (SwiGLU, GeGLU) or plain MLP       (n, d)
    resid_out     x'_i = m_i + r g_i          layer output (next layer's resid_in)     (n, d)

and, once per model, ``capture["final_norm_in"]`` (the last resid_out, (n, d)),
``capture["final_norm_out"]`` and ``capture["logits"]`` ((n, V), None for a base model).
``capture["embeddings"]`` is x^0, the first layer's resid_in (token + learned positions for GPT-2).

Because LN1 normalises each token before the value projection, v^h_j and f^h(x_j) are functions
of x_j alone: the decomposition m_i = x_i + sum_{j<=i} F_ij + r b_O is exact (no post-residual
norm to linearise, unlike post-LN encoders). :func:`run_decoder` checks this identity, the
declared norms, the residual adds and the logits on every captured pass
(:func:`cmixlib.forward.decoder_checks.check_capture`) and raises
:class:`~cmixlib.forward.decoder_checks.DecompositionError`, naming the model, when one fails.
The model is never forked: every tensor above comes from hooks on the model's own modules
during one forward pass with eager attention (SDPA and flash attention return no weights;
:func:`run_decoder` then raises with what to do).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from cmixlib.forward.decoder_checks import check_capture, check_decoder_model
from cmixlib.forward import decomposition
from cmixlib.models.arch import (DecoderParts, UnsupportedModelError, decoder_final_norm,
                                 random_decoder_config)

__all__ = ["LAYER_POINTS", "MODEL_POINTS", "DecoderLayerState", "DecoderCapture", "run_decoder",
           "random_decoder", "perturb_decoder_norms_and_biases"]

#: Capture points of every layer (module docstring), in the order the forward pass meets them.
LAYER_POINTS = ("resid_in", "ln1_out", "attn_weights", "values", "head_out", "attn_out",
                "resid_mid", "ln2_out", "mlp_out", "resid_out")
#: Capture points of the whole model.
MODEL_POINTS = ("embeddings", "final_norm_in", "final_norm_out", "logits")


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


@dataclass
class DecoderLayerState:
    """One layer of one sentence (batch dimension removed): the captured tensors and the
    decomposition derived from them lazily. ``raw_values`` is the value module's output
    (n, KV d_h), before the grouped-query expansion; ``call`` the ``(args, kwargs)`` the model
    called the layer with (to re-run it on other hidden states)."""

    parts: DecoderParts
    resid_in: torch.Tensor
    ln1_out: torch.Tensor
    attn_weights: torch.Tensor
    raw_values: torch.Tensor
    attn_out: torch.Tensor
    resid_mid: torch.Tensor
    ln2_out: torch.Tensor
    mlp_out: torch.Tensor
    resid_out: torch.Tensor
    call: tuple[tuple, dict] | None = field(default=None, repr=False)

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in LAYER_POINTS:
            raise KeyError(f"Unknown capture point {name!r}; layer points: {LAYER_POINTS}.")
        return getattr(self, name)

    @property
    def n(self) -> int:
        return self.resid_in.shape[0]

    @cached_property
    def kv_index(self) -> torch.Tensor:
        """g(h) = h // (H / KV): the key-value head each query head reads, (H,)."""
        p = self.parts
        return torch.arange(p.num_heads, device=self.resid_in.device) // (
            p.num_heads // p.num_kv_heads)

    @cached_property
    def values(self) -> torch.Tensor:
        """v^h_j per query head (GQA expanded), (H, n, d_h), value bias included."""
        p = self.parts
        v = self.raw_values.view(self.n, p.num_kv_heads, p.head_dim)
        if p.value_clip is not None:                       # OLMo's clip_qkv
            v = v.clamp(-p.value_clip, p.value_clip)
        return v[:, self.kv_index, :].transpose(0, 1)

    @cached_property
    def head_out(self) -> torch.Tensor:
        """f^h(x_j) = r v^h_j W_O^h, (H, n, d): W_O^h the columns h d_h .. (h+1) d_h of W_O,
        r the residual multiplier (1 except Granite): what head h writes to the residual."""
        p = self.parts
        w_o = p.w_o.reshape(p.w_o.shape[0], p.num_heads, p.head_dim)     # (d, H, d_h)
        out = torch.einsum("hnk,dhk->hnd", self.values, w_o)
        return out if p.residual_multiplier == 1.0 else out * p.residual_multiplier

    @property
    def b_o(self) -> torch.Tensor | None:
        """r b_O (None without an output bias): the bias as it enters the residual."""
        b = self.parts.b_o
        r = self.parts.residual_multiplier
        return b if b is None or r == 1.0 else b * r

    def attn_vectors_for(self, rows: torch.Tensor) -> torch.Tensor:
        """F_ij = sum_h alpha^h_ij f^h(x_j) for the given rows i, (r, n, d); 0 for j > i."""
        return decomposition.attention_vectors(self.attn_weights[:, rows, :], self.head_out)

    @cached_property
    def attn_vectors(self) -> torch.Tensor:
        """F_ij for every row, (n, n, d)."""
        return self.attn_vectors_for(torch.arange(self.n, device=self.resid_in.device))

    def release(self) -> None:
        """Drop the derived tensors cached on this state (``values``, ``head_out``,
        ``attn_vectors``; recomputed on the next access): the methods call it after each layer,
        so that one layer's derived tensors are held at a time."""
        for name in ("values", "head_out", "attn_vectors"):
            self.__dict__.pop(name, None)

    def recomputed_attn_out(self) -> torch.Tensor:
        """r a_i = sum_j F_ij + r b_O from the decomposition (r = 1: the captured ``attn_out``;
        tests compare them)."""
        a = torch.einsum("hij,hjd->id", self.attn_weights, self.head_out)
        return a if self.b_o is None else a + self.b_o

    def mlp_block(self, m: torch.Tensor) -> torch.Tensor:
        """x' = m + r MLP(LN2(m)) for residuals m of any leading shape (the model's own
        modules; r the residual multiplier)."""
        g = self.parts.mlp(self.parts.ln2(m))
        r = self.parts.residual_multiplier
        return m + (g if r == 1.0 else g * r)


@dataclass
class DecoderCapture:
    """What one forward pass of a decoder leaves behind: :class:`DecoderLayerState` per layer
    and the model-level points (:data:`MODEL_POINTS`); ``input_ids`` (n,)."""

    layers: list[DecoderLayerState]
    input_ids: torch.Tensor
    final_norm_in: torch.Tensor
    final_norm_out: torch.Tensor
    logits: torch.Tensor | None

    @property
    def embeddings(self) -> torch.Tensor:
        return self.layers[0].resid_in

    def __getitem__(self, name: str) -> torch.Tensor | None:
        if name not in MODEL_POINTS:
            raise KeyError(f"Unknown model capture point {name!r}: {MODEL_POINTS} (layer points "
                           "are read from capture.layers[l][name]).")
        return getattr(self, name)


_EAGER_HINT = ("load the model with attn_implementation='eager' (e.g. AutoModelForCausalLM."
               "from_pretrained(name, attn_implementation='eager'), or call "
               "model.set_attn_implementation('eager')): SDPA and flash attention do not return "
               "attention weights")

@torch.no_grad()
def run_decoder(model: torch.nn.Module, input_ids: torch.Tensor, *, check: bool = True
                ) -> DecoderCapture:
    """One ordinary forward pass of a supported pre-LN decoder on one unpadded sentence
    (``input_ids`` of shape (n,) or (1, n)), with hooks at every capture point (module
    docstring). Refused before the forward pass (:class:`~cmixlib.UnsupportedModelError`): an
    unlisted family or unsupported dtype
    (:func:`~cmixlib.forward.decoder_checks.check_decoder_model`); after it: missing
    attention weights (not eager attention) and, with ``check``, a failed identity
    (:func:`~cmixlib.forward.decoder_checks.check_capture`,
    :class:`~cmixlib.forward.decoder_checks.DecompositionError`)."""
    parts = check_decoder_model(model)
    fam = parts[0].family
    ids = torch.as_tensor(input_ids).reshape(1, -1)
    device = next(model.parameters()).device
    ids = ids.to(device)
    rec: list[dict[str, Any]] = [{} for _ in parts]
    final: dict[str, torch.Tensor] = {}
    handles = []

    def keep(k, name, pick=_first):
        def hook(mod, args, out):
            rec[k][name] = pick(out)
        return hook

    for k, p in enumerate(parts):
        def pre_layer(mod, args, kwargs, k=k):
            rec[k]["call"] = (args, kwargs)
            rec[k]["resid_in"] = args[0] if args else kwargs["hidden_states"]

        def attn_hook(mod, args, out, k=k):
            rec[k]["attn_out"] = _first(out)
            rec[k]["attn_weights"] = out[1] if isinstance(out, (tuple, list)) and len(out) > 1 \
                else None

        def pre_ln2(mod, args, k=k):
            rec[k]["resid_mid"] = args[0]

        handles += [p.layer.register_forward_pre_hook(pre_layer, with_kwargs=True),
                    p.ln1.register_forward_hook(keep(k, "ln1_out")),
                    p.value.register_forward_hook(keep(k, "raw_values",
                                                       lambda o: fam.value_output(_first(o)))),
                    p.attn.register_forward_hook(attn_hook),
                    p.ln2.register_forward_pre_hook(pre_ln2),
                    p.ln2.register_forward_hook(keep(k, "ln2_out")),
                    p.mlp.register_forward_hook(keep(k, "mlp_out")),
                    p.layer.register_forward_hook(keep(k, "resid_out"))]
    norm = decoder_final_norm(model)
    handles += [norm.register_forward_pre_hook(lambda mod, args: final.update(inp=args[0])),
                norm.register_forward_hook(lambda mod, args, out: final.update(out=out))]
    try:
        result = model(input_ids=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    states = []
    for k, (p, r) in enumerate(zip(parts, rec)):
        if r.get("attn_weights") is None:
            raise UnsupportedModelError(
                f"Layer {k} of {type(model).__name__} returned no attention weights "
                f"(attn_implementation={getattr(model.config, '_attn_implementation', '?')!r}): "
                f"{_EAGER_HINT}.")
        fields = {name: r[name][0] for name in ("resid_in", "ln1_out", "raw_values", "attn_out",
                                                "resid_mid", "ln2_out", "mlp_out", "resid_out")}
        states.append(DecoderLayerState(parts=p, attn_weights=r["attn_weights"][0],
                                        call=r["call"], **fields))
    logits = getattr(result, "logits", None)
    cap = DecoderCapture(layers=states, input_ids=ids[0], final_norm_in=final["inp"][0],
                         final_norm_out=final["out"][0],
                         logits=None if logits is None else logits[0])
    if check:
        check_capture(cap, model)
    return cap


@torch.no_grad()
def perturb_decoder_norms_and_biases(model: torch.nn.Module, generator: torch.Generator) -> None:
    """In place: norm gains ~ U[0.5, 1.5], LayerNorm and projection biases ~ N(0, 0.1), so that
    the handling of gains and biases is exercised (HF initialises them to 1 and 0)."""
    for module in model.modules():
        name = type(module).__name__
        if isinstance(module, torch.nn.LayerNorm) or name.endswith("RMSNorm"):
            w = module.weight
            w.copy_(torch.rand(w.shape, generator=generator, dtype=w.dtype) + 0.5)
            if getattr(module, "bias", None) is not None:
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator,
                                                    dtype=module.bias.dtype))
        elif (isinstance(module, torch.nn.Linear) or name == "Conv1D") \
                and getattr(module, "bias", None) is not None:
            module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator,
                                                dtype=module.bias.dtype))


def random_decoder(arch: str = "llama", *, hidden: int = 48, layers: int = 3, heads: int = 6,
                   kv_heads: int | None = None, intermediate: int = 96, vocab: int = 101,
                   seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A small random causal LM of decoder family ``arch`` (``"llama"`` with grouped-query
    attention, ``kv_heads`` default 2 for Llama; ``"gpt2"``), eager attention, eval mode, norm
    gains and biases randomised (:func:`perturb_decoder_norms_and_biases`)."""
    import transformers

    if kv_heads is None:
        kv_heads = heads if arch == "gpt2" else 2
    cfg = random_decoder_config(arch, hidden=hidden, layers=layers, heads=heads,
                                kv_heads=kv_heads, intermediate=intermediate, vocab=vocab)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    perturb_decoder_norms_and_biases(model, torch.Generator().manual_seed(seed + 1))
    return model.to(dtype).eval()
