"""The one table of pre-LN decoder families (:data:`DECODER_FAMILIES`), declared.

Pre-LN decoder LMs are described by this table, read (through :mod:`cmixlib.models.arch.decoders`) by
cmixlib.forward.decoder (the captured forward pass) and cmixlib.methods.decoder. One pre-LN decoder
layer, in the notation of cmixlib.forward.decoder, and the parts named here (r the residual
multiplier, 1 except Granite)::

    x --ln1--> u --value (W_V, b_V)--> v --alpha (causal), out (W_O, b_O)--> a;  m = x + r a
    m --ln2--> w --mlp--> g;  x' = m + r g (the layer output);
    logits = unembed(final_norm(x')) / logits_divisor

A family is accepted by its config.model_type only (never by its module names): a model
whose model_type is not in DECODER_FAMILIES is refused before any forward pass, with the
reason when DECODER_REFUSED knows it. The encoder helpers (:mod:`cmixlib.models.arch.encoders`: family_of,
layer_parts, ...) keep refusing decoders.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from cmixlib.models.arch.common import get_path

__all__ = ["DECODER_PART_NAMES", "DECODER_NORMS", "NORM_GAINS", "DecoderFamily",
           "DECODER_FAMILIES", "DECODER_REFUSED", "SUPPORTED_DECODERS"]


#: Parts of one decoder layer (attribute paths inside the layer module).
DECODER_PART_NAMES = ("ln1", "attn", "value", "out", "ln2", "mlp")
#: Norm kinds: RMSNorm h / rms(h) * gain, LayerNorm (h - mean) / std * gain + beta.
DECODER_NORMS = ("rmsnorm", "layernorm")
#: How a norm's gain is read: its weight w, 1 + w (Gemma), or none (OLMo: gain 1, no beta).
NORM_GAINS = ("w", "1+w", "none")


def _linear_weights(path: str) -> Callable[[torch.nn.Module], tuple[torch.Tensor, Any]]:
    """(weight (out, in), bias or None) of the ``nn.Linear`` at ``path`` inside a layer."""
    def read(layer: torch.nn.Module) -> tuple[torch.Tensor, Any]:
        lin = get_path(layer, path)
        return lin.weight, lin.bias
    return read


def _conv1d_value(layer: torch.nn.Module) -> tuple[torch.Tensor, Any]:
    """GPT-2's fused ``c_attn`` (Conv1D, y = x W + b, W of shape (d, 3d), columns q | k | v):
    the value slice as a Linear-convention weight (d, d) and bias (d,)."""
    conv = layer.attn.c_attn
    d = conv.weight.shape[0]
    return conv.weight[:, 2 * d:].t(), conv.bias[2 * d:]


def _conv1d_out(layer: torch.nn.Module) -> tuple[torch.Tensor, Any]:
    """GPT-2's ``c_proj`` (Conv1D, weight (H d_head, d)) as a Linear-convention (d, H d_head)."""
    conv = layer.attn.c_proj
    return conv.weight.t(), conv.bias


def _value_slice_of_fused(out: torch.Tensor) -> torch.Tensor:
    """The value third of GPT-2's fused q | k | v projection output (..., 3d) -> (..., d)."""
    d = out.shape[-1] // 3
    return out[..., 2 * d:]


@dataclass(frozen=True)
class DecoderFamily:
    """What one pre-LN decoder family is, declared (attribute paths dotted).

    ``model_types``: the ``config.model_type`` values accepted (the only way in);
    ``layers``: the layer list, from the base model (``model.base_model``); ``layer``: the parts
    of one layer (keys ``DECODER_PART_NAMES``: the two norms, the attention module, whose
    forward returns ``(output, weights)``, the module whose output holds the values, the output
    projection and the MLP module); ``final_norm``: from the base model; ``unembed``: the LM head
    on the ``*ForCausalLM`` model; ``norm``: ``"rmsnorm"`` (h / rms(h) * gain) or
    ``"layernorm"`` (centred, h / std(h) * gain + beta); ``norm_gain``: ``"w"`` (gain = weight),
    ``"1+w"`` (Gemma: gain = 1 + weight) or ``"none"`` (OLMo: no parameters, gain 1);
    ``norm_eps``: the epsilon when the module holds none (OLMo's 1e-5, fixed in its forward);
    ``residual_multiplier_key`` (Granite): config name of r in m = x + r a, x' = m + r g;
    ``logits_divisor_key`` (Granite's ``logits_scaling``): logits = unembed(.) / s;
    ``value_clip_key`` (OLMo's ``clip_qkv``): values clamped to [-c, c] after the projection;
    ``value_weights`` / ``out_weights``: functions of a layer module giving
    ``(W_V (KV d_head, d), b_V or None)`` and ``(W_O (d, H d_head), b_O or None)`` in the
    ``nn.Linear`` convention (y = x W^T + b) whatever the module type; ``value_output``: the
    values in the value module's output (all of it, or the last third of a fused q | k | v);
    ``mlp_in``, ``mlp_down``, ``mlp_act``: the MLP's input projections, output projection and
    activation: MLP(w) = down(act(in_0 w) * in_1 w) with two input projections (SwiGLU's gate
    and up), down(act(in_0 w)) with one; ``heads_key`` / ``kv_heads_key``: config names of the
    query and key-value head counts (None: no grouped-query attention); ``refuse_when``:
    ``(config key, value, reason)`` triples of settings that break the decomposition;
    ``in_forward``: what the family does that needs no declaration because the capture reads it
    from the model's own tensors (embedding scaling in x^0, query/key norms and attention
    multipliers in alpha); ``config``: the ``transformers`` config class and how its names spell
    size, depth, heads, key-value heads, FFN width and vocabulary; ``config_extra``: further
    values for tiny random models.
    """

    name: str
    model_types: tuple[str, ...]
    layers: str
    layer: dict[str, str]
    final_norm: str
    unembed: str
    norm: str
    value_weights: Callable[[torch.nn.Module], tuple[torch.Tensor, Any]]
    out_weights: Callable[[torch.nn.Module], tuple[torch.Tensor, Any]]
    value_output: Callable[[torch.Tensor], torch.Tensor] = lambda out: out
    mlp_in: tuple[str, ...] = ("mlp.gate_proj", "mlp.up_proj")
    mlp_down: str = "mlp.down_proj"
    mlp_act: str = "mlp.act_fn"
    heads_key: str = "num_attention_heads"
    kv_heads_key: str | None = "num_key_value_heads"
    norm_gain: str = "w"
    norm_eps: float | None = None
    residual_multiplier_key: str | None = None
    logits_divisor_key: str | None = None
    value_clip_key: str | None = None
    refuse_when: tuple[tuple[str, Any, str], ...] = ()
    in_forward: str = "RoPE and the attention scale in alpha"
    config: tuple[str, dict[str, str]] = ("LlamaConfig", {})
    config_extra: dict[str, Any] = field(default_factory=dict)


_LLAMA_LAYER = {"ln1": "input_layernorm", "attn": "self_attn", "value": "self_attn.v_proj",
                "out": "self_attn.o_proj", "ln2": "post_attention_layernorm", "mlp": "mlp"}
_LLAMA_NAMES = {"hidden": "hidden_size", "layers": "num_hidden_layers",
                "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
                "intermediate": "intermediate_size", "vocab": "vocab_size"}
_RANDOM = {"max_position_embeddings": 256, "initializer_range": 0.1}


def _llama_like(name: str, config_cls: str, *, model_types: tuple[str, ...] | None = None,
                extra: dict[str, Any] | None = None, **declared: Any) -> DecoderFamily:
    """A family laid out as Llama (q/k/v/o projections, two norms, gated MLP)."""
    return DecoderFamily(
        name, model_types or (name,), "layers", dict(_LLAMA_LAYER), final_norm="norm",
        unembed="lm_head", value_weights=_linear_weights("self_attn.v_proj"),
        out_weights=_linear_weights("self_attn.o_proj"), config=(config_cls, _LLAMA_NAMES),
        config_extra={**_RANDOM, **(extra or {})}, **{"norm": "rmsnorm", **declared})


_PARALLEL = ("the attention and the MLP read the same normalised input and are added to the "
             "residual together (x' = x + a + g), so there is no m_i = x_i + a_i for Value "
             "Zeroing's MLP to read; load a checkpoint with use_parallel_residual=False")

#: The supported pre-LN decoder families, by ``config.model_type``.
DECODER_FAMILIES: dict[str, DecoderFamily] = {f.name: f for f in (
    _llama_like("llama", "LlamaConfig", extra={"attention_bias": True, "mlp_bias": True}),
    _llama_like("mistral", "MistralConfig"),
    _llama_like("qwen2", "Qwen2Config"),
    _llama_like("qwen3", "Qwen3Config", extra={"attention_bias": True},
                in_forward="RoPE, the per-head query/key RMSNorms and the scale in alpha"),
    _llama_like("gemma", "GemmaConfig", norm_gain="1+w", extra={"attention_bias": True},
                in_forward="the sqrt(d) embedding scale in x^0; RoPE and the scale in alpha"),
    _llama_like("granite", "GraniteConfig", residual_multiplier_key="residual_multiplier",
                logits_divisor_key="logits_scaling",
                extra={"attention_bias": True, "mlp_bias": True, "embedding_multiplier": 3.0,
                       "residual_multiplier": 0.7, "attention_multiplier": 0.2,
                       "logits_scaling": 2.5},
                in_forward="embedding_multiplier in x^0; attention_multiplier and RoPE in alpha"),
    _llama_like("stablelm", "StableLmConfig", norm="layernorm",
                refuse_when=(("use_parallel_residual", True, _PARALLEL),),
                extra={"use_qkv_bias": True, "qk_layernorm": True},
                in_forward="partial RoPE and the optional per-head query/key LayerNorms in alpha"),
    _llama_like("olmo", "OlmoConfig", norm="layernorm", norm_gain="none", norm_eps=1e-5,
                value_clip_key="clip_qkv", extra={"attention_bias": True, "clip_qkv": 0.4},
                in_forward="RoPE and the query/key clipping in alpha"),
    DecoderFamily(
        "starcoder2", ("starcoder2",), "layers", dict(_LLAMA_LAYER), final_norm="norm",
        unembed="lm_head", norm="layernorm", value_weights=_linear_weights("self_attn.v_proj"),
        out_weights=_linear_weights("self_attn.o_proj"), mlp_in=("mlp.c_fc",),
        mlp_down="mlp.c_proj", mlp_act="mlp.act",
        config=("Starcoder2Config", _LLAMA_NAMES), config_extra={**_RANDOM, "use_bias": True}),
    DecoderFamily(
        "gpt2", ("gpt2",), "h",
        {"ln1": "ln_1", "attn": "attn", "value": "attn.c_attn", "out": "attn.c_proj",
         "ln2": "ln_2", "mlp": "mlp"},
        final_norm="ln_f", unembed="lm_head", norm="layernorm",
        value_weights=_conv1d_value, out_weights=_conv1d_out,
        value_output=_value_slice_of_fused, mlp_in=("mlp.c_fc",), mlp_down="mlp.c_proj",
        mlp_act="mlp.act", heads_key="n_head", kv_heads_key=None,
        in_forward="learned positions in x^0; the fused q | k | v (value third read)",
        config=("GPT2Config", {"hidden": "n_embd", "layers": "n_layer", "heads": "n_head",
                               "intermediate": "n_inner", "vocab": "vocab_size"}),
        config_extra={"n_positions": 256, "initializer_range": 0.1, "bos_token_id": 0,
                      "eos_token_id": 0}),
)}

_POST_NORMS = ("it normalises the attention output and the MLP output again before each "
               "residual add (post_attention_layernorm / post_feedforward_layernorm), so "
               "m_i = x_i + sum_j F_ij + b_O does not hold and no exact per-source decomposition "
               "of the residual exists without linearising those norms")
#: Decoder model types refused with the reason (any other unlisted model_type is refused too).
DECODER_REFUSED: dict[str, str] = {
    "gemma2": _POST_NORMS + "; its logits are also soft-capped (tanh), not linear",
    "gemma3": _POST_NORMS, "gemma3_text": _POST_NORMS, "olmo2": _POST_NORMS,
    "imagegpt": "ImageGPT has GPT-2's module names but is a pixel model with its own "
                "(unscaled, mean-free) LayerNorm; no family declaration covers it",
    "gpt_bigcode": "GPT-BigCode's multi-query attention and fused c_attn have no declaration "
                   "in cmixlib.models.arch.DECODER_FAMILIES",
    "gpt_neox": "GPT-NeoX uses a parallel residual by default: " + _PARALLEL,
    "phi": "Phi uses a parallel residual: " + _PARALLEL,
    "cohere": "Cohere uses a parallel residual: " + _PARALLEL,
}

SUPPORTED_DECODERS = ("pre-LN causal LMs whose config.model_type is one of "
                      + ", ".join(DECODER_FAMILIES) + " (SmolLM2 is llama)")

