"""The post-LN encoder families (:data:`FAMILIES`) and the functions that read their parts.

Every other module reaches an encoder's parts through the functions here
(:func:`family_of`, :func:`layer_list`, :func:`layer_parts`, :func:`mlm_head`,
:func:`embedding_output_module`, :func:`num_layers`, ...). Supporting a new post-LN family means
adding one :class:`Family` entry to :data:`FAMILIES`.

One encoder layer, in the notation of :mod:`cmixlib.forward.encoder`, and the parts named here::

    x --query, key, value--> attention --out (W_O, b_O)--> + x --ln1--> y
    y --ffn_in, act, ffn_out--> + y --ln2--> o (the layer output)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from cmixlib.models.arch.common import UnsupportedModelError, get_path, has_path
from cmixlib.models.arch.decoder_families import SUPPORTED_DECODERS

__all__ = ["Family", "FAMILIES", "SUPPORTED_FAMILIES", "PART_NAMES", "LayerParts",
           "family_of", "fits", "layer_holder", "layer_list", "layer_parts", "parts_of_layer",
           "num_layers", "num_heads", "embedding_output_module", "mlm_head", "position_offset",
           "random_config"]

SUPPORTED_FAMILIES = "BERT, RoBERTa (also XLM-R/CamemBERT), ELECTRA, DistilBERT and MPNet encoders"

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

        d, ln = get_path(model, dense), get_path(model, norm)
        a = get_path(model, act) if act is not None else gelu
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
           mlm_transform=lambda m: get_path(m, "cls.predictions.transform"),
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
           mlm_transform=lambda m: get_path(m, "generator_predictions"),
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


def fits(family: Family, base: torch.nn.Module) -> bool:
    """Whether ``base`` has ``family``'s layer list and every part of its first layer."""
    if not has_path(base, family.layers):
        return False
    layers = list(get_path(base, family.layers))
    return bool(layers) and all(has_path(layers[0], p) for p in family.layer.values())


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
        if fits(fam, base):
            return fam
    raise UnsupportedModelError(
        f"cmixlib cannot read {type(model).__name__} (model_type={model_type or '?'!r}). "
        f"Supported: {SUPPORTED_FAMILIES} loaded with transformers (e.g. AutoModel / "
        "AutoModelForMaskedLM / AutoModelForSequenceClassification). Pre-LN decoder LMs "
        f"({SUPPORTED_DECODERS}) are read by cmixlib.forward.decoder instead (cmixlib.context_mixing "
        "routes them there); other architectures (other pre-LN models, ALBERT's shared layers, "
        "DeBERTa's relative attention) are not covered; a new post-LN family is one entry in "
        "cmixlib.models.arch.FAMILIES.")


def layer_holder(model: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    """``(module, attribute)`` such that ``getattr(module, attribute)`` is the layer list."""
    fam = family_of(model)
    parent, _, attr = fam.layers.rpartition(".")
    base = getattr(model, "base_model", model)
    return (get_path(base, parent) if parent else base), attr


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
                      **{part: get_path(layer, path) for part, path in fam.layer.items()})


def embedding_output_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose output is ``hidden_states[0]`` (after LayerNorm; after ELECTRA's
    projection to the hidden size)."""
    base = getattr(model, "base_model", model)
    for path in family_of(model).embeddings:
        if has_path(base, path) and get_path(base, path) is not None:
            return get_path(base, path)
    raise UnsupportedModelError(f"No embedding module found on {type(model).__name__}.")


def mlm_head(model: torch.nn.Module
             ) -> tuple[Callable[[torch.Tensor], torch.Tensor], torch.nn.Linear]:
    """``(transform, decoder)`` of a masked-LM head: logits = ``decoder(transform(h))`` for final
    hidden states ``h`` (any leading shape), so logits can be computed at chosen positions only,
    or for chosen decoder rows only (:math:`z_t = \\mathrm{transform}(h)\\cdot W_t + b_t`)."""
    fam = family_of(model)
    if not has_path(model, fam.mlm_decoder):
        raise TypeError(
            f"{type(model).__name__} has no masked-LM head (expected {fam.mlm_decoder!r} for the "
            f"{fam.name} family): load it with task='mlm' (AutoModelForMaskedLM).")
    return fam.mlm_transform(model), get_path(model, fam.mlm_decoder)


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

