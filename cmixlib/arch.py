"""Architecture facts: the one place that knows the module names of each supported encoder family.

Every other module reaches an encoder's parts through the functions here
(:func:`family_of`, :func:`layer_list`, :func:`layer_parts`, :func:`mlm_head`,
:func:`embedding_output_module`, :func:`num_layers`, ...). Supporting a new post-LN family means
adding one :class:`Family` entry to :data:`FAMILIES`.

Pre-LN decoder LMs have their own table, :data:`DECODER_FAMILIES` of :class:`DecoderFamily`
entries keyed by ``config.model_type`` (llama, mistral, qwen2, qwen3, gemma, granite, stablelm,
starcoder2, olmo, gpt2), each declaring its norm (RMSNorm with gain w or 1 + w, LayerNorm with
or without parameters), residual and logit multipliers, value clipping and parts; what has no
exact decomposition is refused with the reason (:data:`DECODER_REFUSED`: post-norms, parallel
residuals, ...). Read through :func:`decoder_family_of`, :func:`require_decoder`,
:func:`decoder_parts`, :func:`decoder_final_norm`, :func:`decoder_unembed` (see the section
below).

One encoder layer, in the notation of :mod:`cmixlib.encoder`, and the parts named here::

    x --query, key, value--> attention --out (W_O, b_O)--> + x --ln1--> y
    y --ffn_in, act, ffn_out--> + y --ln2--> o (the layer output)
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

__all__ = ["Family", "FAMILIES", "SUPPORTED_FAMILIES", "UnsupportedModelError", "LayerParts",
           "DecoderFamily", "DECODER_FAMILIES", "DecoderParts", "decoder_family_of",
           "is_decoder_lm", "norm_params", "linear_weights",
           "decoder_parts", "decoder_final_norm", "decoder_unembed", "random_decoder_config",
           "DECODER_REFUSED", "decoder_norm_params", "apply_decoder_norm", "require_decoder",
           "decoder_logits_divisor",
           "family_of", "layer_holder", "layer_list", "layer_parts", "parts_of_layer", "num_layers", "num_heads",
           "embedding_output_module", "mlm_head", "position_offset", "random_config"]

SUPPORTED_FAMILIES = "BERT, RoBERTa (also XLM-R/CamemBERT), ELECTRA, DistilBERT and MPNet encoders"


class UnsupportedModelError(TypeError):
    """The model is not a post-LN BERT-family encoder that cmixlib can read.

    Examples
    --------
    >>> import torch, cmixlib
    >>> cmixlib.context_mixing(torch.nn.Linear(2, 2), None, {"input_ids": torch.tensor([[1, 2]])})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cmixlib.arch.UnsupportedModelError: cmixlib cannot read Linear (model_type='?'). Supported: ...
    """


#: The parts of one layer that the decompositions read, as attribute paths inside the layer.
PART_NAMES = ("query", "key", "value", "out", "ln1", "ffn_in", "act", "ffn_out", "ln2")

_BERT_LAYER = {"query": "attention.self.query", "key": "attention.self.key",
               "value": "attention.self.value", "out": "attention.output.dense",
               "ln1": "attention.output.LayerNorm", "ffn_in": "intermediate.dense",
               "act": "intermediate.intermediate_act_fn", "ffn_out": "output.dense",
               "ln2": "output.LayerNorm"}


def _head(dense: str, norm: str, act: str | None = None) -> Callable[[torch.nn.Module], Callable]:
    """An MLM transform ``norm(act(dense(h)))`` whose modules sit on ``model``; ``act`` is the
    path of the activation module, or None for the GELU function (RoBERTa's head calls it)."""
    def transform(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        from transformers.activations import gelu

        d, ln = _get(model, dense), _get(model, norm)
        a = _get(model, act) if act is not None else gelu
        return lambda h: ln(a(d(h)))
    return transform


@dataclass(frozen=True)
class Family:
    """Where one encoder family keeps its parts (attribute paths, dotted).

    ``layers``: the ``ModuleList`` of layers, from the base model; ``layer``: the parts of one
    layer (keys :data:`PART_NAMES`); ``embeddings``: the module whose output is
    ``hidden_states[0]`` (the first that exists); ``mlm_transform``/``mlm_decoder``: the masked-LM
    head on the ``*ForMaskedLM`` model (logits = decoder(transform(h))); ``position_offset``:
    positions reserved before the first token (RoBERTa's padding index); ``config``: the
    ``transformers`` config class and how its names spell size, depth, heads, FFN width and vocab;
    ``config_extra``: further config values, or functions of those sizes.
    """

    name: str
    model_types: tuple[str, ...]
    layers: str
    layer: dict[str, str]
    embeddings: tuple[str, ...]
    mlm_transform: Callable[[torch.nn.Module], Callable[[torch.Tensor], torch.Tensor]]
    mlm_decoder: str
    layer_count_key: str = "num_hidden_layers"
    heads_key: str = "num_attention_heads"
    position_offset: int = 0
    config: tuple[str, dict[str, str]] = ("BertConfig", {})
    config_extra: dict[str, Any] = field(default_factory=dict)


_BERT_CONFIG_NAMES = {"hidden": "hidden_size", "layers": "num_hidden_layers",
                      "heads": "num_attention_heads", "intermediate": "intermediate_size",
                      "vocab": "vocab_size"}

#: The supported families, looked up by ``config.model_type`` and, failing that, by layout.
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("bert", ("bert",), "encoder.layer", _BERT_LAYER, ("embeddings",),
           mlm_transform=lambda m: _get(m, "cls.predictions.transform"),
           mlm_decoder="cls.predictions.decoder",
           config=("BertConfig", _BERT_CONFIG_NAMES),
           config_extra={"max_position_embeddings": 128}),
    Family("roberta", ("roberta", "xlm-roberta", "camembert"), "encoder.layer", _BERT_LAYER,
           ("embeddings",), mlm_transform=_head("lm_head.dense", "lm_head.layer_norm"),
           mlm_decoder="lm_head.decoder", position_offset=2,
           config=("RobertaConfig", _BERT_CONFIG_NAMES),
           config_extra={"max_position_embeddings": 130, "pad_token_id": 1, "bos_token_id": 0,
                         "eos_token_id": 2}),
    Family("electra", ("electra",), "encoder.layer", _BERT_LAYER,
           ("embeddings_project", "embeddings"),
           mlm_transform=lambda m: _get(m, "generator_predictions"),
           mlm_decoder="generator_lm_head",
           config=("ElectraConfig", _BERT_CONFIG_NAMES),
           config_extra={"max_position_embeddings": 128,
                         "embedding_size": lambda sizes: sizes["hidden"] // 2}),
    Family("mpnet", ("mpnet",), "encoder.layer",
           {"query": "attention.attn.q", "key": "attention.attn.k", "value": "attention.attn.v",
            "out": "attention.attn.o", "ln1": "attention.LayerNorm", "ffn_in": "intermediate.dense",
            "act": "intermediate.intermediate_act_fn", "ffn_out": "output.dense",
            "ln2": "output.LayerNorm"},
           ("embeddings",), mlm_transform=_head("lm_head.dense", "lm_head.layer_norm"),
           mlm_decoder="lm_head.decoder", position_offset=2,
           config=("MPNetConfig", _BERT_CONFIG_NAMES),
           config_extra={"max_position_embeddings": 130, "pad_token_id": 1, "bos_token_id": 0,
                         "eos_token_id": 2}),
    Family("distilbert", ("distilbert",), "transformer.layer",
           {"query": "attention.q_lin", "key": "attention.k_lin", "value": "attention.v_lin",
            "out": "attention.out_lin", "ln1": "sa_layer_norm", "ffn_in": "ffn.lin1",
            "act": "ffn.activation", "ffn_out": "ffn.lin2", "ln2": "output_layer_norm"},
           ("embeddings",),
           mlm_transform=_head("vocab_transform", "vocab_layer_norm", "activation"),
           mlm_decoder="vocab_projector", layer_count_key="n_layers", heads_key="n_heads",
           config=("DistilBertConfig", {"hidden": "dim", "layers": "n_layers", "heads": "n_heads",
                                        "intermediate": "hidden_dim", "vocab": "vocab_size"}),
           config_extra={"max_position_embeddings": 128}),
)}


def _get(obj: Any, path: str) -> Any:
    """``obj.a.b.c`` for ``path="a.b.c"``; AttributeError if any step is missing."""
    return operator.attrgetter(path)(obj)


def _has(obj: Any, path: str) -> bool:
    try:
        _get(obj, path)
    except AttributeError:
        return False
    return True


def _fits(family: Family, base: torch.nn.Module) -> bool:
    """Whether ``base`` has ``family``'s layer list and every part of its first layer."""
    if not _has(base, family.layers):
        return False
    layers = list(_get(base, family.layers))
    return bool(layers) and all(_has(layers[0], p) for p in family.layer.values())


def family_of(model: torch.nn.Module) -> Family:
    """The :class:`Family` of ``model`` (a base model or one with a head).

    Looked up by ``config.model_type`` first, then by layout (the first family whose layer parts
    all exist: e.g. a BERT-shaped model under another name). Raises
    :class:`UnsupportedModelError` with what is supported, for decoders and unknown layouts.
    """
    cfg = getattr(model, "config", None)
    if cfg is not None and (getattr(cfg, "is_decoder", False)
                            or getattr(cfg, "is_encoder_decoder", False)):
        raise UnsupportedModelError(
            f"{type(model).__name__} is configured as a decoder; cmixlib supports "
            f"{SUPPORTED_FAMILIES} (bidirectional, post-LayerNorm). Load the encoder without "
            "is_decoder=True.")
    base = getattr(model, "base_model", model)
    model_type = getattr(cfg, "model_type", "")
    candidates = [f for f in FAMILIES.values() if model_type in f.model_types]
    candidates += [f for f in FAMILIES.values() if f not in candidates]
    for fam in candidates:
        if _fits(fam, base):
            return fam
    raise UnsupportedModelError(
        f"cmixlib cannot read {type(model).__name__} (model_type={model_type or '?'!r}). "
        f"Supported: {SUPPORTED_FAMILIES} loaded with transformers (e.g. AutoModel / "
        "AutoModelForMaskedLM / AutoModelForSequenceClassification). Pre-LN decoder LMs "
        f"({SUPPORTED_DECODERS}) are read by cmixlib.decoder instead (cmixlib.context_mixing "
        "routes them there); other architectures (other pre-LN models, ALBERT's shared layers, "
        "DeBERTa's relative attention) are not covered; a new post-LN family is one entry in "
        "cmixlib.arch.FAMILIES.")


def layer_holder(model: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    """``(module, attribute)`` such that ``getattr(module, attribute)`` is the layer list."""
    fam = family_of(model)
    parent, _, attr = fam.layers.rpartition(".")
    base = getattr(model, "base_model", model)
    return (_get(base, parent) if parent else base), attr


def layer_list(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The encoder layer modules, in order."""
    holder, attr = layer_holder(model)
    return list(getattr(holder, attr))


@dataclass
class LayerParts:
    """The sub-modules of one encoder layer that the decompositions read (see module docstring)."""

    layer: torch.nn.Module
    query: torch.nn.Linear
    key: torch.nn.Linear
    value: torch.nn.Linear
    out: torch.nn.Linear          # attention output projection W_O, b_O
    ln1: torch.nn.LayerNorm       # post-attention LayerNorm
    ffn_in: torch.nn.Linear
    act: Callable[[torch.Tensor], torch.Tensor]
    ffn_out: torch.nn.Linear
    ln2: torch.nn.LayerNorm       # post-FFN LayerNorm
    num_heads: int


def num_heads(model: torch.nn.Module) -> int:
    """Attention heads per layer, from the config."""
    return int(getattr(model.config, family_of(model).heads_key))


def num_layers(model: torch.nn.Module) -> int:
    """Encoder layers, from the config."""
    return int(getattr(model.config, family_of(model).layer_count_key))


def layer_parts(model: torch.nn.Module) -> list[LayerParts]:
    """:class:`LayerParts` of every layer (raises :class:`UnsupportedModelError` if unsupported)."""
    fam = family_of(model)
    heads = int(getattr(model.config, fam.heads_key))
    return [parts_of_layer(layer, fam, heads) for layer in layer_list(model)]


def parts_of_layer(layer: torch.nn.Module, family: Family | str, heads: int) -> LayerParts:
    """:class:`LayerParts` of one layer module of ``family`` (a :class:`Family` or its name)."""
    fam = FAMILIES[family] if isinstance(family, str) else family
    return LayerParts(layer=layer, num_heads=heads,
                      **{part: _get(layer, path) for part, path in fam.layer.items()})


def embedding_output_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose output is ``hidden_states[0]`` (after LayerNorm; after ELECTRA's
    projection to the hidden size)."""
    base = getattr(model, "base_model", model)
    for path in family_of(model).embeddings:
        if _has(base, path) and _get(base, path) is not None:
            return _get(base, path)
    raise UnsupportedModelError(f"No embedding module found on {type(model).__name__}.")


def mlm_head(model: torch.nn.Module
             ) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.nn.Linear]:
    """``(transform, decoder)`` of a masked-LM head: logits = ``decoder(transform(h))`` for final
    hidden states ``h`` (any leading shape), so logits can be computed at chosen positions only,
    or for chosen decoder rows only (:math:`z_t = \\mathrm{transform}(h)\\cdot W_t + b_t`)."""
    fam = family_of(model)
    if not _has(model, fam.mlm_decoder):
        raise TypeError(
            f"{type(model).__name__} has no masked-LM head (expected {fam.mlm_decoder!r} for the "
            f"{fam.name} family): load it with task='mlm' (AutoModelForMaskedLM).")
    return fam.mlm_transform(model), _get(model, fam.mlm_decoder)


def position_offset(model: torch.nn.Module) -> int:
    """Position ids reserved before the first token (2 for RoBERTa's padding index, else 0)."""
    return family_of(model).position_offset


def random_config(arch: str, *, hidden: int, layers: int, heads: int, intermediate: int,
                  vocab: int) -> Any:
    """A ``transformers`` config of family ``arch`` with the given sizes (for tiny random models)."""
    import transformers

    if arch not in FAMILIES:
        raise ValueError(f"Unknown architecture {arch!r}; choose one of {tuple(FAMILIES)}.")
    fam = FAMILIES[arch]
    cls_name, names = fam.config
    sizes = {"hidden": hidden, "layers": layers, "heads": heads, "intermediate": intermediate,
             "vocab": vocab}
    kwargs = {names[k]: v for k, v in sizes.items()}
    for key, value in fam.config_extra.items():
        kwargs[key] = value(sizes) if callable(value) else value
    return getattr(transformers, cls_name)(**kwargs)


# --------------------------------------------------------------------------- pre-LN decoders
#
# Pre-LN decoder LMs are described by a second table, DECODER_FAMILIES, read by
# cmixlib.decoder (the captured forward pass) and cmixlib.decoder_methods. One pre-LN decoder
# layer, in the notation of cmixlib.decoder, and the parts named here (r the residual
# multiplier, 1 except Granite):
#
#     x --ln1--> u --value (W_V, b_V)--> v --alpha (causal), out (W_O, b_O)--> a;  m = x + r a
#     m --ln2--> w --mlp--> g;  x' = m + r g (the layer output);
#     logits = unembed(final_norm(x')) / logits_divisor
#
# A family is accepted by its config.model_type only (never by its module names): a model
# whose model_type is not in DECODER_FAMILIES is refused before any forward pass, with the
# reason when DECODER_REFUSED knows it. The encoder helpers above (family_of, layer_parts, ...)
# keep refusing decoders.

#: Parts of one decoder layer (attribute paths inside the layer module).
DECODER_PART_NAMES = ("ln1", "attn", "value", "out", "ln2", "mlp")
#: Norm kinds: RMSNorm h / rms(h) * gain, LayerNorm (h - mean) / std * gain + beta.
DECODER_NORMS = ("rmsnorm", "layernorm")
#: How a norm's gain is read: its weight w, 1 + w (Gemma), or none (OLMo: gain 1, no beta).
NORM_GAINS = ("w", "1+w", "none")


def _linear_weights(path: str) -> Callable[[torch.nn.Module], tuple[torch.Tensor, Any]]:
    """(weight (out, in), bias or None) of the ``nn.Linear`` at ``path`` inside a layer."""
    def read(layer: torch.nn.Module) -> tuple[torch.Tensor, Any]:
        lin = _get(layer, path)
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
                   "in cmixlib.arch.DECODER_FAMILIES",
    "gpt_neox": "GPT-NeoX uses a parallel residual by default: " + _PARALLEL,
    "phi": "Phi uses a parallel residual: " + _PARALLEL,
    "cohere": "Cohere uses a parallel residual: " + _PARALLEL,
}

SUPPORTED_DECODERS = ("pre-LN causal LMs whose config.model_type is one of "
                      + ", ".join(DECODER_FAMILIES) + " (SmolLM2 is llama)")


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


def _looks_causal(model: Any) -> bool:
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
    return decoder_family_of(model) is not None or _looks_causal(model)


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
        return [linear_weights(_get(self.layer, p)) for p in self.family.mlp_in]

    @property
    def mlp_down(self) -> tuple[torch.Tensor, Any]:
        """(W (d, d_ff), b or None) of the MLP output projection."""
        return linear_weights(_get(self.layer, self.family.mlp_down))

    @property
    def mlp_act(self) -> Callable[[torch.Tensor], torch.Tensor]:
        return _get(self.layer, self.family.mlp_act)

    def norm_params(self, which: str) -> tuple[torch.Tensor, Any, float]:
        """(gain, beta or None, eps) of ``"ln1"``, ``"ln2"`` as the family declares them."""
        return decoder_norm_params(self.family, getattr(self, which), self.w_o)


def norm_params(module: torch.nn.Module) -> tuple[torch.Tensor, Any, float]:
    """(gamma, beta or None, eps) of a LayerNorm or an RMSNorm (``variance_epsilon`` or ``eps``),
    read as stored (the decoder path uses :func:`decoder_norm_params`)."""
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    return module.weight, getattr(module, "bias", None), float(eps)


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


def linear_weights(module: torch.nn.Module) -> tuple[torch.Tensor, Any]:
    """(W (out, in), b or None) of an ``nn.Linear`` or of GPT-2's ``Conv1D`` (W transposed)."""
    if type(module).__name__ == "Conv1D":
        return module.weight.t(), module.bias
    return module.weight, module.bias


def require_decoder(model: torch.nn.Module) -> DecoderFamily:
    """The model's :class:`DecoderFamily`, after refusing (with the reason) an unlisted
    ``model_type`` or a setting in the family's ``refuse_when``; no forward pass is run."""
    fam = decoder_family_of(model)
    cfg = getattr(model, "config", None)
    model_type = getattr(cfg, "model_type", None)
    name = f"{type(model).__name__} (model_type={model_type!r})"
    if fam is None:
        why = DECODER_REFUSED.get(model_type, "this model_type is not declared in "
                                  "cmixlib.arch.DECODER_FAMILIES")
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
    layers = _get(getattr(model, "base_model", model), fam.layers)
    return [DecoderParts(layer=layer, family=fam, num_heads=heads, num_kv_heads=kv,
                         residual_multiplier=r, value_clip=None if clip is None else float(clip),
                         **{p: _get(layer, path) for p, path in fam.layer.items()})
            for layer in layers]


def decoder_final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The final norm (``model.norm`` / ``transformer.ln_f``) applied before the LM head."""
    fam = require_decoder(model)
    return _get(getattr(model, "base_model", model), fam.final_norm)


def decoder_logits_divisor(model: torch.nn.Module) -> float:
    """s in logits = unembed(final_norm(x)) / s (Granite's ``logits_scaling``; else 1)."""
    fam = require_decoder(model)
    return float(getattr(model.config, fam.logits_divisor_key)) if fam.logits_divisor_key \
        else 1.0


def decoder_unembed(model: torch.nn.Module) -> torch.nn.Linear:
    """The LM head (logits = h_final U^T (+ b)); TypeError for a base model without one."""
    fam = require_decoder(model)
    if not _has(model, fam.unembed):
        raise TypeError(f"{type(model).__name__} has no LM head (expected {fam.unembed!r}): load "
                        "it with AutoModelForCausalLM for logit-based methods (ALTI-Logit).")
    return _get(model, fam.unembed)


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
