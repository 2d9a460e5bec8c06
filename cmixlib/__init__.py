"""cmixlib: context mixing in Transformer encoders.

Start with :func:`load_model` and :func:`context_mixing`; :data:`METHODS` lists every method.
Families of methods live in their own modules: :mod:`cmixlib.norms` (N, N-Res, N-ResLN, GlobEnc,
ALTI), :mod:`cmixlib.value_zeroing`, :mod:`cmixlib.attention` (rollout, flow),
:mod:`cmixlib.gradients` (gradient and erasure baselines), :mod:`cmixlib.data`,
:mod:`cmixlib.training`, :mod:`cmixlib.evaluation`, :mod:`cmixlib.probing`.
"""
from .models import ModelBundle, ModelLoadError, load_model, random_model, packaged_model_path, default_model_name
from .encoder import UnsupportedModelError
from .attention import rollout, attention_flow, normalize_rows
from .core import (METHODS, InputError, Method, check_methods, context_mixing, context_mixing_ratio,
                   describe_methods, tokens)
from . import data, evaluation, gradients

__version__ = "0.1.0"
