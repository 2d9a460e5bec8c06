"""The one registry of method names, display labels, colours and references.

Every method the book compares has one entry here: the context-mixing methods that
:func:`cmixlib.context_mixing` computes (``kind`` ``"layer"``: one map per layer;
``"aggregated"``: across layers) and the baselines of :mod:`cmixlib.gradients` (``"gradient"``,
``"erasure"``, ``"control"``). :mod:`cmixlib.methods.dispatch` validates names against it, and
:mod:`cmixlib.plotting` and the notebooks take labels and colours from it
(:func:`method_label`, :func:`method_color`), so a method looks the same everywhere.

Experiments also name some methods another way: ``"grad_x_input"`` is the L2-aggregated
gradient × input (:data:`ALIASES`), and ``"rollout:X"`` is the rollout of layer-wise method X.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Method", "ALL_METHODS", "MIXING_KINDS", "ALIASES", "ROLLOUT_PREFIX",
           "METHOD_LABELS", "METHOD_COLORS", "resolve", "method_label", "method_color",
           "describe_methods"]


@dataclass(frozen=True)
class Method:
    """One method: its name in code, its label in tables and figures, its colour, where it comes
    from, and (for aggregated methods) the layer-wise method it rolls out.

    Examples
    --------
    >>> from cmixlib import METHODS
    >>> m = METHODS["alti"]
    >>> m.label, m.kind, m.base
    ('ALTI', 'aggregated', 'alti_layer')
    """

    name: str
    label: str
    kind: str       # "layer", "aggregated", "logit" (decoders), "gradient", "erasure", "control"
    reference: str
    description: str
    colour: str
    base: str | None = None


_AZ, _K20, _K21 = "Abnar & Zuidema 2020", "Kobayashi et al. 2020", "Kobayashi et al. 2021"
_GE, _ALTI, _VZ = "Modarressi et al. 2022", "Ferrando et al. 2022", "Mohebbi et al. 2023"

# Colours by family: attention blues, norm purples, GlobEnc oranges/browns, ALTI greens,
# Value Zeroing reds, baselines greys / teal / pink.
_ENTRIES = (
    Method("attention", "Attention", "layer", "Vaswani et al. 2017",
           "Raw attention weights averaged over heads.", "#9ecae1"),
    Method("attention_rollout", "Attention rollout", "aggregated", _AZ,
           "Rollout of 0.5 A + 0.5 I.", "#4292c6", base="attention"),
    Method("attention_flow", "Attention flow", "aggregated", _AZ,
           "Max-flow from each input token to each output token in the graph of 0.5 A + 0.5 I; "
           "rows normalised.", "#08519c", base="attention"),
    Method("attn_norm", "N", "layer", _K20,
           "||sum_h alpha^h_ij f^h(x_j)||, f^h including the value bias.", "#bcbddc"),
    Method("attn_norm_res", "N-Res", "layer", _K21,
           "N with the residual x_i added on the diagonal.", "#807dba"),
    Method("attn_norm_res_ln", "N-ResLN", "layer", _K21,
           "N-Res vectors through the exact LN1 decomposition.", "#54278f"),
    Method("globenc_layer", "N-Enc", "layer", _GE,
           "N-ResLN vectors through the LN2 decomposition (FFN only via the LN2 scale).",
           "#fdae6b"),
    Method("globenc", "GlobEnc", "aggregated", _GE,
           "Rollout of row-normalised N-Enc.", "#e6550d", base="globenc_layer"),
    Method("w_fixedres", "W-FixedRes", "layer", _GE, "0.5 A + 0.5 I.", "#fdd0a2"),
    Method("n_fixedres", "N-FixedRes", "layer", _GE, "0.5 rownorm(N) + 0.5 I.", "#a63603"),
    Method("w_res", "W-Res", "layer", _GE,
           "Attention without its diagonal, mixed with I by N-Enc's context-mixing ratio.",
           "#d9a066"),
    Method("alti_layer", "ALTI (layer)", "layer", _ALTI,
           "max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), y_i the LN1 output.", "#74c476"),
    Method("alti", "ALTI", "aggregated", _ALTI,
           "Rollout of row-normalised ALTI contributions.", "#006d2c", base="alti_layer"),
    Method("value_zeroing", "Value Zeroing", "layer", _VZ,
           "Distance between the layer output with token j's value zeroed and the original.",
           "#fb6a4a"),
    Method("value_zeroing_rollout", "Value Zeroing rollout", "aggregated", _VZ,
           "Rollout of row-normalised Value Zeroing maps.", "#a50f15", base="value_zeroing"),
    Method("alti_logit", "ALTI-Logit", "logit", "Ferrando et al. 2023",
           "Decoder LMs: each layer's attention contribution to a target logit (or logit "
           "difference) through the linearised final norm, carried to input tokens by ALTI "
           "rollout.", "#41ab5d"),
    Method("grad_l2", "Grad (L2)", "gradient", "Li et al. 2016",
           "||g_j||_2, g_j = d f / d x_j the gradient w.r.t. token j's input vector.", "#969696"),
    Method("grad_x_input_l2", "Grad×Input (L2)", "gradient", "Kindermans et al. 2016",
           "||g_j ⊙ x_j||_2.", "#636363"),
    Method("grad_x_input_abs", "Grad×Input (|·|)", "gradient", "Kindermans et al. 2016",
           "|g_j · x_j|.", "#252525"),
    Method("integrated_gradients", "Integrated gradients", "gradient",
           "Sundararajan et al. 2017",
           "sum_d (x_jd - x'_jd) times the mean of g_jd on the straight path from x' to x "
           "(signed sum; the experiments aggregate by L2).",
           "#1b9e77"),
    Method("deeplift", "DeepLift", "gradient", "Shrikumar et al. 2017",
           "sum_d (x_jd - x'_jd) m_jd with DeepLift's rescale-rule multipliers m (signed sum; "
           "the experiments aggregate by L2).", "#66a61e"),
    Method("blank_out", "Blank-out", "erasure", "Li et al. 2016",
           "p(y|x) - p(y|x with token j replaced, e.g. by [UNK]).", "#e7298a"),
    Method("random", "Random", "control", "",
           "Uniform random scores (a floor for every evaluation).", "#d9d9d9"),
    Method("nearness", "Nearness", "control", "",
           "-|j - t|: minus the distance of token j from the explained position t (a floor: "
           "what the position alone explains).", "#737373"),
)

#: Every method, by name.
ALL_METHODS: dict[str, Method] = {m.name: m for m in _ENTRIES}
#: Kinds computed by :func:`cmixlib.context_mixing`.
MIXING_KINDS = ("layer", "aggregated")
#: Names the experiments use for a method registered under another name.
ALIASES: dict[str, str] = {"grad_x_input": "grad_x_input_l2"}
ROLLOUT_PREFIX = "rollout:"
#: Views of the registry: name -> label, name -> colour.
METHOD_LABELS: dict[str, str] = {m.name: m.label for m in _ENTRIES}
METHOD_COLORS: dict[str, str] = {m.name: m.colour for m in _ENTRIES}
_UNKNOWN_COLOUR = "#7f7f7f"


def resolve(name: str) -> str:
    """``name`` with an alias resolved and a ``rollout:`` prefix dropped."""
    name = name.removeprefix(ROLLOUT_PREFIX)
    return ALIASES.get(name, name)


def method_label(name: str) -> str:
    """Display label of method ``name`` (the name itself when unknown); ``"rollout:X"`` is
    "<label of X> rollout", and aliases (:data:`ALIASES`) are resolved.

    Examples
    --------
    >>> from cmixlib import method_label
    >>> method_label("alti"), method_label("rollout:attn_norm"), method_label("my_method")
    ('ALTI', 'N rollout', 'my_method')
    """
    if name.startswith(ROLLOUT_PREFIX):
        return f"{method_label(name.removeprefix(ROLLOUT_PREFIX))} rollout"
    return METHOD_LABELS.get(resolve(name), name)


def method_color(name: str) -> str:
    """Colour of method ``name`` (a neutral grey when unknown); ``"rollout:X"`` has the colour
    of ``X``.

    Examples
    --------
    >>> from cmixlib import method_color
    >>> method_color("rollout:alti_layer") == method_color("alti_layer")
    True
    >>> method_color("my_method")
    '#7f7f7f'
    """
    return METHOD_COLORS.get(resolve(name), _UNKNOWN_COLOUR)


def describe_methods(kinds: Sequence[str] | None = MIXING_KINDS) -> Any:
    """The registry as a pandas DataFrame (name, label, kind, reference, description, colour,
    base): the context-mixing methods by default, every method with ``kinds=None``.

    Examples
    --------
    >>> from cmixlib import METHODS, describe_methods
    >>> table = describe_methods()
    >>> list(table.columns)
    ['name', 'label', 'kind', 'reference', 'description', 'colour', 'base']
    >>> len(table) == len(METHODS) and len(describe_methods(kinds=None)) > len(table)
    True
    """
    import pandas as pd

    return pd.DataFrame([asdict(m) for m in _ENTRIES if kinds is None or m.kind in kinds])
