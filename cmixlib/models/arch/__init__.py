"""Architecture facts: the one place that knows the module names of each supported family.

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

One encoder layer, in the notation of :mod:`cmixlib.forward.encoder`, and the parts named here::

    x --query, key, value--> attention --out (W_O, b_O)--> + x --ln1--> y
    y --ffn_in, act, ffn_out--> + y --ln2--> o (the layer output)

The package's modules: :mod:`~cmixlib.models.arch.common` (the refusal error, dotted-path reads),
:mod:`~cmixlib.models.arch.encoders` (the encoder table and its readers),
:mod:`~cmixlib.models.arch.decoder_families` (the decoder table) and :mod:`~cmixlib.models.arch.decoders` (its
readers). Every public name is re-exported here: ``from cmixlib.models.arch import X`` is the way in.
"""
from __future__ import annotations

from cmixlib.models.arch.common import (UnsupportedModelError, get_path, has_path, linear_weights,
                                        norm_params)
from cmixlib.models.arch.decoder_families import (DECODER_FAMILIES, DECODER_NORMS,
                                                  DECODER_PART_NAMES, DECODER_REFUSED, NORM_GAINS,
                                                  SUPPORTED_DECODERS, DecoderFamily)
from cmixlib.models.arch.decoders import (DecoderParts, apply_decoder_norm, decoder_family_of,
                                          decoder_final_norm, decoder_logits_divisor,
                                          decoder_norm_params, decoder_parts, decoder_unembed,
                                          is_decoder_lm, looks_causal, random_decoder_config,
                                          require_decoder)
from cmixlib.models.arch.encoders import (FAMILIES, PART_NAMES, SUPPORTED_FAMILIES, Family,
                                          LayerParts, embedding_output_module, family_of, fits,
                                          layer_holder, layer_list, layer_parts, mlm_head,
                                          num_heads, num_layers, parts_of_layer, position_offset,
                                          random_config)

__all__ = ["Family", "FAMILIES", "SUPPORTED_FAMILIES", "UnsupportedModelError", "LayerParts",
           "DecoderFamily", "DECODER_FAMILIES", "DecoderParts", "decoder_family_of",
           "is_decoder_lm", "norm_params", "linear_weights", "decoder_parts",
           "decoder_final_norm", "decoder_unembed", "random_decoder_config", "DECODER_REFUSED",
           "decoder_norm_params", "apply_decoder_norm", "require_decoder",
           "decoder_logits_divisor", "get_path", "has_path", "family_of", "layer_holder",
           "layer_list", "layer_parts", "parts_of_layer", "num_layers", "num_heads",
           "embedding_output_module", "mlm_head", "position_offset", "random_config"]
