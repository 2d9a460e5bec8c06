"""A method with its options: the objects :func:`cmixlib.context_mixing` takes in ``methods``
beside plain names (as captum has one class per method, each holding its own settings).

A name is its method with the defaults: ``"value_zeroing"`` is ``ValueZeroing()``, ``"alti"``
is ``MixingMethod("alti")``. An option belongs to the method it changes, and is checked where
it is given, so an encoder and a decoder refuse the same mistake with the same error:

- :class:`ValueZeroing` (``value_zeroing``, ``value_zeroing_rollout``): ``distance``
  (``"cosine"``, ``"euclidean"``, ``"spearman"``), ``standardize`` (None, True, or a
  (mean, std) pair; Appendix A.1 of Mohebbi et al. 2023), ``implementation`` (``"auto"``,
  ``"factored"``, ``"batched"``: the same numbers), ``convention`` (``"default"``, or
  ``"inseq"`` on a decoder LM: :mod:`cmixlib.methods.value_zeroing_decoder`).
- ``normalize_layers`` of the rollouts of :data:`ROLLOUTS_OF_LAYER_MAPS` (``globenc``,
  ``alti``, ``value_zeroing_rollout``): True (default) rolls out the row-normalised layer maps
  :math:`\\hat{C}^{\\ell} = \\tilde{C}^{\\ell}\\hat{C}^{\\ell-1}`; False multiplies the raw
  maps, as GlobEnc's original code does, and normalises the final rows.
- :class:`AltiLogit` (``alti_logit``, decoder LMs): the ``target`` token whose logit it
  explains and the ``foil`` whose logit is subtracted (ids or one-token strings, one per
  position, or for a batch one per prompt; :mod:`cmixlib.forward.decoder_inputs`).

:func:`resolve_methods` turns a request into names and the options the map code reads.

Examples
--------
>>> import torch, cmixlib
>>> from cmixlib.methods.options import MixingMethod, ValueZeroing
>>> model = cmixlib.random_model("bert", layers=2)
>>> ids = {"input_ids": torch.tensor([[1, 5, 6, 7, 2]])}
>>> res = cmixlib.context_mixing(model, None, ids,
...                              [ValueZeroing(distance="euclidean"), "alti"])
>>> sorted(res), res.options["methods"]
(['alti', 'value_zeroing'], ['value_zeroing', 'alti'])
>>> ValueZeroing(distance="manhattan")
Traceback (most recent call last):
...
cmixlib.validation.InputError: Unknown Value Zeroing distance 'manhattan': distance must be one of 'cosine', 'euclidean', 'spearman'.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from cmixlib.methods.registry import ALL_METHODS, MIXING_KINDS, Method
from cmixlib.methods.vz_distances import DISTANCES, VZ_CONVENTIONS, VZ_METHODS
from cmixlib.validation import InputError, check_bool, check_choice, describe

__all__ = ["MixingMethod", "ValueZeroing", "AltiLogit", "ROLLOUTS_OF_LAYER_MAPS",
           "MOVED_OPTIONS", "method_options", "resolve_methods", "refuse_moved_options"]

#: Rollouts whose layer maps can be multiplied raw (``normalize_layers=False``).
ROLLOUTS_OF_LAYER_MAPS = ("globenc", "alti", "value_zeroing_rollout")
_VZ_NAMES = ("value_zeroing", "value_zeroing_rollout")
_MIXING = tuple(n for n, m in ALL_METHODS.items() if m.kind in MIXING_KINDS + ("logit",))


@dataclass(frozen=True, eq=False, repr=False)
class MixingMethod:
    """A context-mixing method of the registry (:data:`cmixlib.METHODS`, or ``alti_logit``)
    with its options; the plain name means ``MixingMethod(name)``.

    ``normalize_layers`` (rollouts of :data:`ROLLOUTS_OF_LAYER_MAPS` only): True rolls out
    row-normalised layer maps, False the raw maps (GlobEnc's original code), its final rows
    normalised.

    Examples
    --------
    >>> from cmixlib.methods.options import MixingMethod
    >>> MixingMethod("globenc", normalize_layers=False).entry.label
    'GlobEnc'
    >>> MixingMethod("attention", normalize_layers=False)
    Traceback (most recent call last):
    ...
    cmixlib.validation.InputError: normalize_layers=False is an option of the rollouts of layer maps ('globenc', 'alti', 'value_zeroing_rollout'); 'attention' has no such option.
    """

    name: str
    normalize_layers: bool = field(default=True, kw_only=True)

    def __post_init__(self) -> None:
        check_choice(self.name, self._names(), "name", what="method")
        check_bool(self.normalize_layers, "normalize_layers")
        if not self.normalize_layers and self.name not in ROLLOUTS_OF_LAYER_MAPS:
            raise InputError(f"normalize_layers=False is an option of the rollouts of layer "
                             f"maps {ROLLOUTS_OF_LAYER_MAPS}; {self.name!r} has no such option.")

    def _names(self) -> Sequence[str]:
        return _MIXING

    @property
    def entry(self) -> Method:
        """The method's registry entry (label, kind, reference, colour, base)."""
        return ALL_METHODS[self.name]

    def options(self) -> dict[str, Any]:
        """The options this object sets, by name (what ``res.options`` records)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "name"
                and (f.name != "normalize_layers" or self.name in ROLLOUTS_OF_LAYER_MAPS)}

    def __repr__(self) -> str:
        changed = {f.name: getattr(self, f.name) for f in fields(self)
                   if f.name != "name" and not _same(getattr(self, f.name), f.default)}
        args = [repr(self.name)] + [f"{k}={describe(v) if _is_array_pair(v) else repr(v)}"
                                    for k, v in changed.items()]
        return f"{type(self).__name__}({', '.join(args)})"


@dataclass(frozen=True, eq=False, repr=False)
class ValueZeroing(MixingMethod):
    """Value Zeroing (Mohebbi et al. 2023; ``value_zeroing``, or its rollout
    ``value_zeroing_rollout``): :math:`C_{ij} = d(o_i, o_i^{\\neg j})`, the distance between
    token i's layer output and the output with token j's value vector zeroed.

    ``distance``: ``"cosine"`` (default), ``"euclidean"``, ``"spearman"`` (1 - rho over the
    hidden coordinates). ``standardize``: None/False, True (this sentence's per-dimension
    statistics), or a (mean, std) pair of arrays of the hidden size, std > 0.
    ``implementation``: ``"auto"`` (the cheaper for the layer's size), ``"factored"``,
    ``"batched"`` (the reference): the same numbers. ``convention``: ``"default"``, or
    ``"inseq"`` (decoder LMs; cosine, no standardisation, no rollout or heads).

    Examples
    --------
    >>> from cmixlib.methods.options import ValueZeroing
    >>> ValueZeroing("value_zeroing_rollout", distance="euclidean")
    ValueZeroing('value_zeroing_rollout', distance='euclidean')
    >>> ValueZeroing(convention="inseq", distance="euclidean")
    Traceback (most recent call last):
    ...
    cmixlib.validation.InputError: convention='inseq' reproduces inseq 0.7.1's decoder Value Zeroing: cosine distance, no standardisation, layer maps only (no rollout, no heads); use convention='default' for the others.
    """

    name: str = "value_zeroing"
    distance: str = field(default="cosine", kw_only=True)
    standardize: Any = field(default=None, kw_only=True)
    implementation: str = field(default="auto", kw_only=True)
    convention: str = field(default="default", kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice(self.distance, DISTANCES, "distance", what="Value Zeroing distance")
        check_choice(self.implementation, VZ_METHODS, "implementation",
                     what="Value Zeroing implementation")
        check_choice(self.convention, VZ_CONVENTIONS, "convention",
                     what="Value Zeroing convention")
        if self.convention == "inseq" and (self.distance != "cosine"
                                           or self.standardize not in (None, False)
                                           or self.name != "value_zeroing"):
            raise InputError("convention='inseq' reproduces inseq 0.7.1's decoder Value "
                             "Zeroing: cosine distance, no standardisation, layer maps only "
                             "(no rollout, no heads); use convention='default' for the others.")

    def _names(self) -> Sequence[str]:
        return _VZ_NAMES

    def settings(self) -> tuple:
        """What the two Value Zeroing methods of one call must share."""
        return (self.distance, self.standardize, self.implementation, self.convention)


@dataclass(frozen=True, eq=False, repr=False)
class AltiLogit(MixingMethod):
    """ALTI-Logit (Ferrando et al. 2023; decoder LMs with an LM head): each layer's attention
    contribution to the logit of ``target`` (minus ``foil``'s), carried to the input tokens by
    the ALTI rollout of the layers below (:mod:`cmixlib.methods.alti_logit`).

    ``target`` / ``foil``: None (the model's top prediction at each position; no foil), a token
    id, a one-token string (``" are"``), one per position, or for a batch one per prompt.

    Examples
    --------
    >>> from cmixlib.methods.options import AltiLogit
    >>> AltiLogit(target=" are", foil=" is")
    AltiLogit('alti_logit', target=' are', foil=' is')
    """

    name: str = "alti_logit"
    target: Any = field(default=None, kw_only=True)
    foil: Any = field(default=None, kw_only=True)

    def _names(self) -> Sequence[str]:
        return ("alti_logit",)


#: The keyword arguments that were options of one method, and where each lives now.
MOVED_OPTIONS = {
    "vz_distance": "ValueZeroing(distance=...)",
    "vz_standardize": "ValueZeroing(standardize=...)",
    "vz_method": "ValueZeroing(implementation=...)",
    "vz_convention": "ValueZeroing(convention=...)",
    "rollout_normalize": "MixingMethod(name, normalize_layers=...) for 'globenc', 'alti' or "
                         "ValueZeroing('value_zeroing_rollout', normalize_layers=...)",
    "logit_target": "AltiLogit(target=...)",
    "logit_foil": "AltiLogit(foil=...)",
}


def refuse_moved_options(function: str, given: dict[str, Any]) -> None:
    """A TypeError for keyword arguments ``function`` does not take, naming the method object
    that takes each of :data:`MOVED_OPTIONS` now."""
    for key in given:
        if key in MOVED_OPTIONS:
            raise TypeError(f"{function}() has no {key}= any more: it is an option of its "
                            f"method. Pass {MOVED_OPTIONS[key]} in methods (cmixlib."
                            "ValueZeroing, cmixlib.MixingMethod and cmixlib.AltiLogit).")
        raise TypeError(f"{function}() got an unexpected keyword argument {key!r}.")


def _is_array_pair(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == 2 and \
        not isinstance(value[0], (str, bool, type(None)))


def _same(a: Any, b: Any) -> bool:
    """Equal options (a (mean, std) pair compared element-wise)."""
    if _is_array_pair(a) or _is_array_pair(b):
        return _is_array_pair(a) and _is_array_pair(b) and all(
            np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))
    if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
        return type(a) is type(b) and a == b
    if hasattr(a, "shape") or hasattr(b, "shape"):
        return a is b
    return a == b


def _as_object(item: MixingMethod | str) -> MixingMethod:
    if isinstance(item, MixingMethod):
        return item
    return (ValueZeroing(item) if item in _VZ_NAMES else
            AltiLogit() if item == "alti_logit" else MixingMethod(item))


def method_options(methods: Any, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """For each method of ``names`` the options it ran with (the object given in ``methods``
    for it, else its defaults): what a result records in ``options["method_options"]``."""
    items = [methods] if isinstance(methods, (str, MixingMethod)) else methods or []
    given = {o.name: o for o in items if isinstance(o, MixingMethod)}
    return {n: (given.get(n) or _as_object(n)).options() for n in names}


def resolve_methods(methods: Any) -> tuple[Any, dict[str, Any]]:
    """``methods`` as given to :func:`cmixlib.context_mixing`, split into what the name checks
    take (the same value with every object replaced by its name; None stays None) and the
    options the map code reads: ``vz_distance``, ``vz_standardize``, ``vz_method``,
    ``vz_convention`` (Value Zeroing's, shared by its layer maps and rollout),
    ``rollout_normalize`` (name -> bool, for :data:`ROLLOUTS_OF_LAYER_MAPS`),
    ``logit_target`` and ``logit_foil``.

    Raises :class:`~cmixlib.InputError` when one call asks for a method twice, or for
    ``value_zeroing`` and ``value_zeroing_rollout`` with different Value Zeroing settings (one
    call computes one Value Zeroing; call twice for two)."""
    single = isinstance(methods, (str, MixingMethod))
    items = [methods] if single else methods
    if methods is None or not isinstance(items, (list, tuple)):
        objects, names = [], methods
    else:
        objects = [_as_object(i) for i in items           # the rest: the name checks
                   if isinstance(i, MixingMethod) or (isinstance(i, str) and i in _MIXING)]
        names = [i.name if isinstance(i, MixingMethod) else i for i in items]
        names = names[0] if single else names
        seen = [o.name for o in objects]
        twice = sorted({n for n in seen if seen.count(n) > 1})
        if twice:
            raise InputError(f"methods asks for {twice} more than once; one call computes each "
                             "method once (call again for another setting).")
    vz = [o for o in objects if isinstance(o, ValueZeroing)] or [ValueZeroing()]
    if any(not all(_same(a, b) for a, b in zip(v.settings(), vz[0].settings())) for v in vz):
        raise InputError(f"{vz[0]!r} and {vz[1]!r} differ in their Value Zeroing settings; "
                         "one call computes one Value Zeroing: give both the same settings, "
                         "or call twice.")
    logit = next((o for o in objects if isinstance(o, AltiLogit)), AltiLogit())
    options = dict(vz_distance=vz[0].distance, vz_standardize=vz[0].standardize,
                   vz_method=vz[0].implementation, vz_convention=vz[0].convention,
                   rollout_normalize={o.name: o.normalize_layers for o in objects
                                      if o.name in ROLLOUTS_OF_LAYER_MAPS},
                   logit_target=logit.target, logit_foil=logit.foil)
    return names, options
