r"""DeepLift's rescale rule for the element-wise activation modules that captum does not know.

Owns :func:`deeplift_rescale` and :func:`rescaled_activation_types`.

Captum's ``DeepLift``/``LayerDeepLift`` apply the rescale rule only to modules of the types it
knows (``nn.ReLU``, ``nn.Tanh``, ``nn.Sigmoid``, ``nn.Softmax``, ...); every other module is
back-propagated with its ordinary gradient. The FFN activation of a Hugging Face encoder is
``transformers.activations.GELUActivation`` (and ELECTRA's and DistilBERT's MLM heads use such
modules too), so out of the box captum treats it like a linear map.

Within ``with deeplift_rescale(model):`` every module of ``model`` whose type is one of
:func:`rescaled_activation_types` (exact type, as captum matches) gets a forward hook
(``nn.Module.register_forward_hook``, public PyTorch) that routes its output through a custom
``torch.autograd.Function``. Captum's DeepLift runs the input and the baseline concatenated on
dim 0, so an activation :math:`y = a(z)` sees :math:`z = [z_x; z_{x'}]`; the function leaves the
forward value unchanged and, in the backward pass, with :math:`g = \partial f/\partial y`,

.. math:: \frac{\partial f}{\partial z} \leftarrow
          \begin{cases} g\,\Delta y / \Delta z & |\Delta z| \ge \varepsilon \\
                        g\, a'(z) & |\Delta z| < \varepsilon \end{cases},
          \qquad \Delta z = z_x - z_{x'},\ \Delta y = a(z_x) - a(z_{x'}),

the same multiplier for both halves (:math:`\Delta` repeated), :math:`\varepsilon = 10^{-10}`
(captum's default ``eps``). This is captum's own rule for the modules it knows (its
``nonlinear`` function), now applied without editing captum's module table; the rule is active
only in grad-enabled forward passes inside the block, which must be DeepLift's (the convergence
delta's extra forward passes run without gradients). Do not list a type captum already handles:
both rules would apply.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch
from torch import nn

__all__ = ["RESCALE_EPS", "deeplift_rescale", "rescaled_activation_types"]

#: :math:`\varepsilon` of the rescale rule: captum's ``DeepLift`` default ``eps``.
RESCALE_EPS = 1e-10

_ACTIVATION_NAMES = ("GELUActivation", "NewGELUActivation", "FastGELUActivation",
                     "QuickGELUActivation", "AccurateGELUActivation", "GELUTanh", "SiLUActivation",
                     "MishActivation")


def rescaled_activation_types() -> tuple[type, ...]:
    """The element-wise activation module types that :func:`deeplift_rescale` handles:
    ``nn.GELU``, ``nn.SiLU``, ``nn.Mish`` and the GELU/SiLU/Mish classes of
    ``transformers.activations`` that exist in the installed version."""
    import transformers.activations as act

    types: list[type] = [nn.GELU, nn.SiLU, nn.Mish]
    types += [getattr(act, name) for name in _ACTIVATION_NAMES
              if isinstance(getattr(act, name, None), type)]
    return tuple(dict.fromkeys(types))


class _RescaleRule(torch.autograd.Function):
    """``forward(z, y, eps) = y`` (``y = a(z)``, the module's own output); backward as in the
    module docstring. The gradient of the :math:`|\\Delta z| < \\varepsilon` elements is sent
    back through ``y``'s own graph (so it is :math:`g\\,a'(z)`, computed by the activation's
    backward), that of the other elements straight to ``z``."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, y: torch.Tensor, eps: float) -> torch.Tensor:
        ctx.save_for_backward(z, y)
        ctx.eps = eps
        return y.clone()

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        z, y = ctx.saved_tensors
        if z.shape[0] % 2:
            raise RuntimeError("deeplift_rescale: the activation's batch is not input and baseline "
                               "concatenated on dim 0 (odd size); use it around DeepLift only.")
        z_in, z_ref = z.chunk(2)
        y_in, y_ref = y.chunk(2)
        dz = torch.cat(2 * [z_in - z_ref])
        dy = torch.cat(2 * [y_in - y_ref])
        small = abs(dz) < ctx.eps
        zero = torch.zeros_like(g)
        return torch.where(small, zero, g * dy / dz), torch.where(small, g, zero), None


def _hook(eps: float):
    def hook(module: nn.Module, inputs: tuple, output: torch.Tensor):
        z = inputs[0] if inputs else None
        if (not torch.is_grad_enabled() or not torch.is_tensor(z) or not torch.is_tensor(output)
                or not (z.requires_grad or output.requires_grad)):
            return None
        if output is z:
            raise RuntimeError(f"deeplift_rescale cannot treat the in-place {type(module).__name__}.")
        return _RescaleRule.apply(z, output, eps)
    return hook


@contextlib.contextmanager
def deeplift_rescale(model: nn.Module, enabled: bool = True, *,
                     types: Sequence[type] | None = None, eps: float = RESCALE_EPS) -> Iterator[None]:
    r"""Within the block, element-wise activation modules of ``model`` follow DeepLift's rescale
    rule :math:`\partial f/\partial z \leftarrow g\,\Delta y/\Delta z` (:math:`g\,a'(z)` where
    :math:`|\Delta z| < \varepsilon`) in captum's ``DeepLift``/``LayerDeepLift`` backward passes.

    ``types``: the module types to treat (exact type match; default
    :func:`rescaled_activation_types`). ``enabled=False`` does nothing (captum's out-of-the-box
    behaviour). The hooks are removed on exit; captum itself is not modified.
    """
    if not enabled:
        yield
        return
    kinds = tuple(types) if types is not None else rescaled_activation_types()
    handles = [m.register_forward_hook(_hook(eps)) for m in model.modules() if type(m) in kinds]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
