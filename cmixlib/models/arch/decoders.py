"""Reading pre-LN decoder LMs through their declared family (:mod:`.decoder_families`).

:func:`decoder_family_of` (by ``config.model_type`` only), :func:`require_decoder` (refusal with
the reason, before any forward pass), :func:`decoder_parts` (:class:`DecoderParts` of every
layer), the declared norms (:func:`decoder_norm_params`, :func:`apply_decoder_norm`), the final
norm, the logit divisor, the LM head and tiny random configs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from cmixlib.models.arch.common import UnsupportedModelError, get_path, has_path, linear_weights
from cmixlib.models.arch.decoder_families import (DECODER_FAMILIES, DECODER_REFUSED,
                                                  SUPPORTED_DECODERS, DecoderFamily)
from cmixlib.models.arch.encoders import FAMILIES

__all__ = ["decoder_family_of", "looks_causal", "is_decoder_lm", "DecoderParts",
           "decoder_norm_params", "apply_decoder_norm", "require_decoder", "decoder_parts",
           "decoder_final_norm", "decoder_logits_divisor", "decoder_unembed",
           "random_decoder_config"]


def decoder_family_of(model: torch.nn.Module) -> DecoderFamily | None:
    """The :class:`DecoderFamily` whose ``model_types`` hold ``model.config.model_type``, None
    for every other model (encoders included, so :func:`family_of` still gives their error).
    Module names are never consulted."""
    cfg = getattr(model, "config", None)
    if cfg is None or not isinstance(model, torch.nn.Module):
        return None
    model_type = getattr(cfg, "model_type", "")
    for fam in DECODER_FAMILIES.values():
        if model_type in fam.model_types:
            return fam
    return None


def looks_causal(model: Any) -> bool:
    """A causal LM that no encoder family claims: routed to the decoder path (and refused
    there with the reason) rather than to the encoder's error."""
    cfg = getattr(model, "config", None)
    model_type = getattr(cfg, "model_type", "")
    if any(model_type in f.model_types for f in FAMILIES.values()):
        return False
    if model_type in DECODER_REFUSED:
        return True
    names = [type(model).__name__, *(getattr(cfg, "architectures", None) or [])]
    return any(n.endswith(("ForCausalLM", "LMHeadModel")) for n in names)


def is_decoder_lm(model: Any) -> bool:
    """Whether ``model`` goes to the decoder path: a listed family (:data:`DECODER_FAMILIES`),
    or a causal LM that no encoder family claims (refused there, before any forward pass)."""
    if not isinstance(model, torch.nn.Module):
        return False
    return decoder_family_of(model) is not None or looks_causal(model)


@dataclass
class DecoderParts:
    """The sub-modules and weights of one pre-LN decoder layer (see :data:`DECODER_FAMILIES`).

    ``w_v`` (KV d_head, d), ``b_v`` (KV d_head,) or None, ``w_o`` (d, H d_head), ``b_o`` (d,) or
    None, in the ``nn.Linear`` convention whatever the module type (GPT-2's Conv1D transposed).
    Query head h reads key-value head ``h // (H / KV)`` (``repeat_kv``'s order).
    ``residual_multiplier`` r (1 except Granite); ``value_clip`` c or None (OLMo)."""

    layer: torch.nn.Module
    ln1: torch.nn.Module
    attn: torch.nn.Module
    value: torch.nn.Module
    out: torch.nn.Module
    ln2: torch.nn.Module
    mlp: torch.nn.Module
    family: DecoderFamily
    num_heads: int
    num_kv_heads: int
    residual_multiplier: float = 1.0
    value_clip: float | None = None

    @property
    def w_v(self) -> torch.Tensor:
        return self.family.value_weights(self.layer)[0]

    @property
    def b_v(self) -> torch.Tensor | None:
        return self.family.value_weights(self.layer)[1]

    @property
    def w_o(self) -> torch.Tensor:
        return self.family.out_weights(self.layer)[0]

    @property
    def b_o(self) -> torch.Tensor | None:
        return self.family.out_weights(self.layer)[1]

    @property
    def head_dim(self) -> int:
        return self.w_o.shape[1] // self.num_heads

    @property
    def mlp_in(self) -> list[tuple[torch.Tensor, Any]]:
        """(W (d_ff, d), b or None) of each MLP input projection (gate, up; or a single c_fc)."""
        return [linear_weights(get_path(self.layer, p)) for p in self.family.mlp_in]

    @property
    def mlp_down(self) -> tuple[torch.Tensor, Any]:
        """(W (d, d_ff), b or None) of the MLP output projection."""
        return linear_weights(get_path(self.layer, self.family.mlp_down))

    @property
    def mlp_act(self) -> Callable[[torch.Tensor], torch.Tensor]:
        return get_path(self.layer, self.family.mlp_act)

    def norm_params(self, which: str) -> tuple[torch.Tensor, Any, float]:
        """(gain, beta or None, eps) of ``"ln1"``, ``"ln2"`` as the family declares them."""
        return decoder_norm_params(self.family, getattr(self, which), self.w_o)


def decoder_norm_params(family: DecoderFamily, module: torch.nn.Module, like: torch.Tensor
                        ) -> tuple[torch.Tensor, Any, float]:
    """(gain, beta or None, eps) of a norm of ``family``: gain = w, 1 + w (Gemma) or ones
    (OLMo, in ``like``'s dtype and device); beta None for RMSNorm and parameter-free norms."""
    if family.norm_gain == "none":
        d = like.shape[0]
        return torch.ones(d, dtype=like.dtype, device=like.device), None, float(family.norm_eps)
    w = module.weight
    gain = w if family.norm_gain == "w" else 1.0 + w
    eps = family.norm_eps if family.norm_eps is not None else \
        getattr(module, "variance_epsilon", getattr(module, "eps", None))
    beta = getattr(module, "bias", None) if family.norm == "layernorm" else None
    return gain, beta, float(eps)


def apply_decoder_norm(family: DecoderFamily, module: torch.nn.Module, h: torch.Tensor,
                       like: torch.Tensor | None = None) -> torch.Tensor:
    """The declared norm of ``family`` applied to ``h`` (last axis) in ``h``'s dtype:
    RMSNorm gain * h / sqrt(mean(h^2) + eps); LayerNorm gain * (h - mean) / sqrt(var + eps)
    + beta. The capture compares it with the module's own output (the declaration checked)."""
    gain, beta, eps = decoder_norm_params(family, module, h[0] if like is None else like)
    if family.norm == "layernorm":
        h = h - h.mean(dim=-1, keepdim=True)
    out = gain * h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + eps)
    return out if beta is None else out + beta


def require_decoder(model: torch.nn.Module) -> DecoderFamily:
    """The model's :class:`DecoderFamily`, after refusing (with the reason) an unlisted
    ``model_type`` or a setting in the family's ``refuse_when``; no forward pass is run."""
    fam = decoder_family_of(model)
    cfg = getattr(model, "config", None)
    model_type = getattr(cfg, "model_type", None)
    name = f"{type(model).__name__} (model_type={model_type!r})"
    if fam is None:
        why = DECODER_REFUSED.get(model_type, "this model_type is not declared in "
                                  "cmixlib.models.arch.DECODER_FAMILIES")
        raise UnsupportedModelError(
            f"cmixlib cannot decompose {name}: {why}. Supported: {SUPPORTED_DECODERS}. A new "
            "family is one declared DecoderFamily entry (its norm, multipliers and parts), "
            "tested against a brute-force reference.")
    for key, bad, why in fam.refuse_when:
        if getattr(cfg, key, None) == bad:
            raise UnsupportedModelError(f"cmixlib cannot decompose {name} with {key}={bad!r}: "
                                        f"{why}.")
    return fam


def decoder_parts(model: torch.nn.Module) -> list[DecoderParts]:
    """:class:`DecoderParts` of every layer of a supported decoder (UnsupportedModelError else)."""
    fam = require_decoder(model)
    cfg = model.config
    heads = int(getattr(cfg, fam.heads_key))
    kv = int(getattr(cfg, fam.kv_heads_key, None) or heads) if fam.kv_heads_key else heads
    r = float(getattr(cfg, fam.residual_multiplier_key)) if fam.residual_multiplier_key else 1.0
    clip = getattr(cfg, fam.value_clip_key, None) if fam.value_clip_key else None
    layers = get_path(getattr(model, "base_model", model), fam.layers)
    return [DecoderParts(layer=layer, family=fam, num_heads=heads, num_kv_heads=kv,
                         residual_multiplier=r, value_clip=None if clip is None else float(clip),
                         **{p: get_path(layer, path) for p, path in fam.layer.items()})
            for layer in layers]


def decoder_final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The final norm (``model.norm`` / ``transformer.ln_f``) applied before the LM head."""
    fam = require_decoder(model)
    return get_path(getattr(model, "base_model", model), fam.final_norm)


def decoder_logits_divisor(model: torch.nn.Module) -> float:
    """s in logits = unembed(final_norm(x)) / s (Granite's ``logits_scaling``; else 1)."""
    fam = require_decoder(model)
    return float(getattr(model.config, fam.logits_divisor_key)) if fam.logits_divisor_key \
        else 1.0


def decoder_unembed(model: torch.nn.Module) -> torch.nn.Linear:
    """The LM head (logits = h_final U^T (+ b)); TypeError for a base model without one."""
    fam = require_decoder(model)
    if not has_path(model, fam.unembed):
        raise TypeError(f"{type(model).__name__} has no LM head (expected {fam.unembed!r}): load "
                        "it with AutoModelForCausalLM for logit-based methods (ALTI-Logit).")
    return get_path(model, fam.unembed)


def random_decoder_config(arch: str, *, hidden: int, layers: int, heads: int,
                          kv_heads: int | None = None, intermediate: int, vocab: int) -> Any:
    """A ``transformers`` config of decoder family ``arch`` (a key of :data:`DECODER_FAMILIES`)
    with the given sizes, for tiny random models (biases and multipliers switched on where the
    family has them, so that their handling is exercised). ``kv_heads`` (None: ``heads``) must
    divide ``heads``; GPT-2 has no grouped-query attention."""
    import transformers

    if arch not in DECODER_FAMILIES:
        raise ValueError(f"Unknown decoder architecture {arch!r}; choose one of "
                         f"{tuple(DECODER_FAMILIES)}.")
    fam = DECODER_FAMILIES[arch]
    kv_heads = heads if kv_heads is None else kv_heads
    if heads % kv_heads:
        raise ValueError(f"kv_heads={kv_heads} must divide heads={heads}.")
    cls_name, names = fam.config
    sizes = {"hidden": hidden, "layers": layers, "heads": heads, "intermediate": intermediate,
             "vocab": vocab, "kv_heads": kv_heads}
    if "kv_heads" not in names and kv_heads != heads:
        raise ValueError(f"{arch} has no grouped-query attention: kv_heads must equal heads.")
    kwargs = {names[k]: v for k, v in sizes.items() if k in names}
    kwargs.update(fam.config_extra)
    if cls_name != "GPT2Config":
        kwargs["head_dim"] = hidden // heads          # Gemma and Qwen3 default to their own
    return getattr(transformers, cls_name)(**kwargs)
