"""cmixlib: context mixing in Transformers (BERT-family encoders; pre-LN decoder LMs).

Start with :func:`load_model` and :func:`context_mixing`; :data:`METHODS` lists every
context-mixing method (:mod:`cmixlib.methods.registry` holds them with the baselines, labels and colours).

Where is what: :mod:`~cmixlib.models.arch` (the module names of each model family, nothing else knows
them), :mod:`~cmixlib.models.loading` (loading, offline fallback), :mod:`~cmixlib.models.random_models`
(tiny random models),
:mod:`~cmixlib.forward.encoder` (one captured forward pass, the per-layer decomposition),
:mod:`~cmixlib.forward.points` (:func:`capture`: every intermediate tensor by name, encoders and
decoders),
:mod:`~cmixlib.methods.norms`, :mod:`~cmixlib.methods.value_zeroing` and :mod:`~cmixlib.methods.aggregation` (the methods),
:mod:`~cmixlib.methods.dispatch` (the entry point; a Llama-style or GPT-2 decoder LM is routed to
:mod:`~cmixlib.methods.decoder`, on :mod:`~cmixlib.forward.decoder`'s captured pass and
:mod:`~cmixlib.methods.value_zeroing_decoder`), :mod:`~cmixlib.gradients` (gradient, erasure and random
baselines), :mod:`~cmixlib.data` (datasets, BLiMP annotation), :mod:`~cmixlib.training` (the
trainers and their one ``fit`` loop), :mod:`~cmixlib.metrics.evaluation` and :mod:`~cmixlib.metrics.probing` (the
papers' metrics), :mod:`~cmixlib.experiments` (the papers' experiments, run by name and cached).
"""
from cmixlib.models.loading import ModelBundle, load_model, packaged_model_path, default_model_name
from cmixlib.models.hub import ModelLoadError
from cmixlib.models.random_models import random_model
from cmixlib.models.arch import UnsupportedModelError
from cmixlib.methods.aggregation import rollout, attention_flow, normalize_rows, row_spread
from cmixlib.methods.dispatch import (METHODS, InputError, Method, check_methods, context_mixing,
                                      context_mixing_ratio, tokens)
from cmixlib.methods.registry import describe_methods, method_color, method_label
from cmixlib.methods.options import AltiLogit, MixingMethod, ValueZeroing
from cmixlib.forward.points import capture
from cmixlib.result import MixingResult
from cmixlib.methods import registry

# The core above needs only torch, transformers, numpy and tqdm. The rest is imported on first
# use (PEP 562), so that `import cmixlib` works without the extras: the experiments and
# datasets (pandas, scipy, scikit-learn, networkx: cmixlib[experiments]), the gradient baselines
# (captum: cmixlib[gradients]) and the book's committed weights.
_LAZY = {
    "data": ("cmixlib.data", None), "metrics": ("cmixlib.metrics", None),
    "methods": ("cmixlib.methods", None),
    "evaluation": ("cmixlib.metrics.evaluation", None),
    "gradients": ("cmixlib.gradients", None), "experiments": ("cmixlib.experiments", None),
    "list_experiments": ("cmixlib.experiments", "list_experiments"),
    "run_experiment": ("cmixlib.experiments", "run_experiment"),
    "load_classifier": ("cmixlib.models.classifiers", "load_classifier"),
    "load_student": ("cmixlib.models.student", "load_student"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'cmixlib' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__version__ = "1.0.0.dev0"   # also the package metadata (pyproject.toml reads it); CHANGELOG.md

#: The public API (``from cmixlib import *``); every name has its page in the book's API reference.
__all__ = [
    # models
    "load_model", "load_classifier", "load_student", "random_model", "ModelBundle", "ModelLoadError", "UnsupportedModelError",
    "packaged_model_path", "default_model_name",
    # context mixing: the entry point and the method registry
    "context_mixing", "MixingResult", "context_mixing_ratio", "tokens", "METHODS", "Method", "InputError",
    "check_methods", "describe_methods", "method_label", "method_color",
    # a method with its options (``methods=[ValueZeroing(distance="euclidean"), "alti"]``)
    "MixingMethod", "ValueZeroing", "AltiLogit",
    # one forward pass, every intermediate tensor by name
    "capture",
    # aggregation across layers
    "rollout", "attention_flow", "normalize_rows", "row_spread",
    # the papers' experiments, run by name and cached
    "run_experiment", "list_experiments",
    # sub-packages (``cmixlib.evaluation`` and ``cmixlib.registry`` stay as aliases of
    # ``cmixlib.metrics.evaluation`` and ``cmixlib.methods.registry``)
    "methods", "metrics", "data", "gradients", "experiments",
]
