r"""Low-rank adapters (LoRA, Hu et al. 2022), the way every committed fine-tune of this project is
trained: the sentence classifiers (``tools/train_classifiers.py``), the distilled student
(``tools/distill_student.py``) and the prompt-fine-tuned MLM (:mod:`.prompt`).

A wrapped linear map computes

.. math::

    y = W x + b + \frac{\alpha}{r} B A x, \qquad A \in \mathbb{R}^{r \times d_\text{in}},
    \; B \in \mathbb{R}^{d_\text{out} \times r},

with :math:`A` Kaiming-uniform and :math:`B = 0` at the start (so training starts from the base
model); :math:`W, b` stay frozen. After training the adapters are merged,
:math:`W' = W + \frac{\alpha}{r} B A` (:func:`cmixlib.models.classifiers.merge_weights`), so the
loaded model is a plain Hugging Face model with no extra modules.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

from cmixlib.models import arch

__all__ = ["LoRALinear", "add_lora", "layer_linear_names", "layer_norm_param_names",
           "trainable_state"]


class LoRALinear(torch.nn.Module):
    """``base(x) + (alpha / r) * x A^T B^T`` with ``A`` (r, in) Kaiming-initialised, ``B`` zero."""

    def __init__(self, base: torch.nn.Linear, r: int, alpha: float):
        super().__init__()
        self.base, self.scale = base, alpha / r
        kw = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.lora_A = torch.nn.Parameter(torch.empty(r, base.in_features, **kw))
        self.lora_B = torch.nn.Parameter(torch.zeros(base.out_features, r, **kw))
        torch.nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scale


def add_lora(model: torch.nn.Module, adapters: Sequence[str], full: Sequence[str], r: int,
             alpha: float) -> dict[str, torch.nn.Parameter]:
    """Freeze ``model``, wrap each linear module named in ``adapters`` in a :class:`LoRALinear`,
    unfreeze the parameters named in ``full``. Returns the trainable parameters under the names
    they are stored with (``<module>.lora_A``/``lora_B`` and the full parameters' own names)."""
    params = dict(model.named_parameters())
    missing = [n for n in full if n not in params]
    if missing:
        raise ValueError(f"add_lora: no parameters named {missing[:3]} in {type(model).__name__}.")
    for p in model.parameters():
        p.requires_grad_(False)
    out = {n: params[n] for n in full}
    for n in adapters:
        module = model.get_submodule(n)
        if not isinstance(module, torch.nn.Linear):
            raise ValueError(f"add_lora: {n} is a {type(module).__name__}, not a torch.nn.Linear.")
        parent, attr = n.rsplit(".", 1)
        wrapped = LoRALinear(module, r, alpha)
        setattr(model.get_submodule(parent), attr, wrapped)
        out[n + ".lora_A"], out[n + ".lora_B"] = wrapped.lora_A, wrapped.lora_B
    for p in out.values():
        p.requires_grad_(True)
    return out


def layer_linear_names(model: torch.nn.Module) -> list[str]:
    """Dotted names of every ``torch.nn.Linear`` inside the model's Transformer layers
    (:func:`cmixlib.models.arch.layer_list`): for BERT the query, key, value, attention-output,
    intermediate and output maps of each layer."""
    layers = {id(layer) for layer in arch.layer_list(model)}
    names: list[str] = []
    for name, module in model.named_modules():
        if id(module) in layers:
            names += [f"{name}.{sub}" for sub, m in module.named_modules()
                      if isinstance(m, torch.nn.Linear)]
    return names


def layer_norm_param_names(model: torch.nn.Module) -> list[str]:
    """Names of the parameters of every ``torch.nn.LayerNorm`` of the model."""
    return [f"{name}.{p}" for name, m in model.named_modules()
            if isinstance(m, torch.nn.LayerNorm) for p, _ in m.named_parameters(recurse=False)]


def trainable_state(params: dict[str, torch.nn.Parameter],
                    dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """Detached CPU copies of ``params`` (what :func:`add_lora` returned), in ``dtype``: what is
    stored and merged (:func:`cmixlib.models.classifiers.merge_weights`)."""
    return {n: p.detach().to("cpu", dtype).contiguous() for n, p in params.items()}
