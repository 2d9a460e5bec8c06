r"""Hidden Token Attribution (HTA) maps of single encoder layers, the baseline of GlobEnc's Figure 4.

**What is computed.** For layer :math:`\ell` with input tokens :math:`x_j = e^{\ell-1}_j` (the
layer's input, ``hidden_states[ℓ-1]`` of a Hugging Face forward, counting layers from 1) and
output tokens :math:`o_i = e^{\ell}_i`, GlobEnc's "HTA × input" (Modarressi et al. 2022, Eq. 18,
adapting the Hidden Token Attribution of Brunner et al. 2020) is

.. math::  c^{\ell}_{i \leftarrow j} = \Big\lVert \frac{\partial e^{\ell}_i}{\partial e^{\ell-1}_j}
           \odot e^{\ell-1}_j \Big\rVert_F
           = \Big( \sum_{a=1}^{d} \sum_{b=1}^{d}
             \Big( \frac{\partial e^{\ell}_{i,a}}{\partial e^{\ell-1}_{j,b}}\, e^{\ell-1}_{j,b} \Big)^2 \Big)^{1/2},

i.e. the :math:`d \times d` Jacobian block of output token :math:`i` w.r.t. input token
:math:`j`, each column :math:`b` scaled by the input value :math:`e^{\ell-1}_{j,b}`
(gradient × input for every output dimension :math:`a`), then the Frobenius norm.
``times_input=False`` gives the plain sensitivity :math:`\lVert \partial e^{\ell}_i / \partial
e^{\ell-1}_j \rVert_F` (the original HTA's gradient, without GlobEnc's × input).

The Jacobian is of the **whole layer** (attention, residual, LN#1, FFN, residual, LN#2), taken at
the real input of that layer for this sentence: other layers are not involved (single-layer,
"local" attribution). ``normalize=True`` (default, as every layer-wise map of :mod:`cmixlib`)
divides each row by its sum, :math:`\tilde c_{i \leftarrow j} = c_{i \leftarrow j} / \sum_k
c_{i \leftarrow k}`, as GlobEnc's HTA notebook does; ``normalize=False`` returns :math:`c`.

**How.** One ordinary forward pass of the model records, with forward pre-hooks, each layer's
input and the exact arguments the model passed to that layer module (attention mask and any
other keyword). The layer's Jacobian is then obtained by calling the **same, unmodified Hugging
Face layer module** with those arguments as a function of its hidden-state input, through
:func:`torch.func.vjp` with the cotangents of all output coordinates of a group of output tokens
batched by :func:`torch.func.vmap` (exactly ``n·d`` vector-Jacobian products per layer, in chunks
of about ``chunk_size``), reduced to :math:`c_{i \leftarrow j}` chunk by chunk so that the
:math:`(n d)^2` Jacobian is never held in memory. The replayed layer must reproduce the model's
own output for that layer (checked; it fails e.g. with dropout active).

Cost: ``n·d`` backward passes through one layer per layer, i.e. of order :math:`n^2 d^3` per
layer; GlobEnc reports about two hours for 256 sentences with BERT-base on a GPU. Measured on 2 CPU
cores with MiniLM (d = 384, 6 layers): 13-38 s for all layers of a 10-12-token sentence and
9-100 s for 8-20 tokens, depending on how busy the cores were.

**Inputs.** One unpadded sentence (the conventions of :func:`cmixlib.context_mixing`: text with a
tokenizer, or a mapping with ``input_ids`` of shape (1, n)); special tokens are ordinary positions
(rows and columns for ``[CLS]`` and ``[SEP]`` are included). Supported: the encoders that
:func:`cmixlib.encoder.encoder_layers` reads (BERT, RoBERTa, ELECTRA, DistilBERT).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from .core import InputError, _check_rows, _unpack_model, encode
from .encoder import encoder_layers, layer_output, record_layer_calls
from .models import model_device

__all__ = ["hta", "HTAError"]


class HTAError(RuntimeError):
    """The layer could not be replayed exactly (e.g. the model is in training mode)."""


def _replay(layer: torch.nn.Module, args: tuple, kwargs: dict):
    """``f(x) -> layer output`` for one sentence: the layer module called as the model called it,
    with the hidden states (first positional argument or ``hidden_states=``) replaced by ``x``."""
    in_args = len(args) > 0

    def f(x: torch.Tensor) -> torch.Tensor:
        h = x.unsqueeze(0)
        if in_args:
            out = layer(h, *args[1:], **kwargs)
        else:
            out = layer(*args, **{**kwargs, "hidden_states": h})
        return layer_output(out)[0]

    hidden = args[0] if in_args else kwargs["hidden_states"]
    return f, hidden[0]


def _layer_hta(f, x: torch.Tensor, expected: torch.Tensor, rows: np.ndarray, times_input: bool,
               chunk_size: int, atol: float) -> np.ndarray:
    """``c[r, j]`` for the output rows ``rows`` of one layer: (len(rows), n)."""
    from torch.func import vjp, vmap

    n, d = x.shape
    with torch.enable_grad():
        out, vjp_fn = vjp(f, x)
    err = float((out.detach() - expected).abs().max())
    if not err <= atol * max(1.0, float(expected.abs().max())):
        raise HTAError(f"Replaying the layer did not reproduce the model's own output (max |diff| = {err:.3g}); "
                       "HTA needs a deterministic model in eval mode (call model.eval()).")
    batched = vmap(vjp_fn)
    per = max(1, int(chunk_size) // d)               # output tokens per vmapped batch
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    scale = x.unsqueeze(0).unsqueeze(0) if times_input else None   # (1, 1, n, d)
    res = torch.empty(len(rows), n, dtype=torch.float64)
    for s in range(0, len(rows), per):
        idx = torch.as_tensor(rows[s:s + per], device=x.device)
        k = len(idx)
        cot = torch.zeros(k, d, n, d, dtype=x.dtype, device=x.device)
        cot[torch.arange(k, device=x.device), :, idx, :] = eye      # cot[r, a, i_r, a] = 1
        with torch.no_grad():
            (g,) = batched(cot.reshape(k * d, n, d))               # g[r*d + a, j, b] = d o_{i_r, a} / d x_{j, b}
        g = g.detach().reshape(k, d, n, d)
        if scale is not None:
            g = g * scale
        res[s:s + k] = g.double().pow(2).sum(dim=(1, 3)).sqrt().cpu()
    return res.numpy()


def hta(model, tokenizer, text, *, times_input: bool = True, normalize: bool = True,
        layers: Sequence[int] | None = None, rows=None, chunk_size: int = 512,
        atol: float = 1e-4) -> np.ndarray:
    r"""HTA × input maps of every layer for one sentence: array ``(L, n, n)``, row i = output token.

    .. math:: c^{\ell}_{i \leftarrow j} = \lVert (\partial e^{\ell}_i / \partial e^{\ell-1}_j)
              \odot e^{\ell-1}_j \rVert_F

    (module docstring). ``model, tokenizer, text`` as in :func:`cmixlib.context_mixing` (a
    :class:`~cmixlib.models.ModelBundle` and None is fine), but one unpadded sentence only.
    ``times_input=False``: :math:`\lVert \partial e^{\ell}_i / \partial e^{\ell-1}_j \rVert_F`.
    ``normalize``: rows divided by their sums (default). ``layers``: 0-based indices of the layers
    to compute (default all; the others are NaN). ``rows``: only these output tokens (the others are
    NaN); the cost is proportional to the number of rows. ``chunk_size``: about how many
    vector-Jacobian products run in one vmapped batch (memory ``chunk_size·n·d`` floats).
    ``atol``: tolerance (relative to the largest output value) of the replay check.
    """
    model, tokenizer = _unpack_model(model, tokenizer)
    if not isinstance(model, torch.nn.Module):
        raise InputError("hta needs a Hugging Face encoder (or a ModelBundle).")
    if model.training:
        raise HTAError("The model is in training mode (dropout is active): call model.eval() first.")
    if int(chunk_size) < 1:
        raise InputError(f"chunk_size must be >= 1, got {chunk_size}.")
    mods = encoder_layers(model)
    ids, mask, is_batch = encode(model, tokenizer, text)
    if is_batch or ids.shape[0] != 1:
        raise InputError("hta takes one sentence at a time (its cost grows with n^2 per layer); loop over a batch.")
    if int(mask.sum()) != ids.shape[1]:
        raise InputError("hta takes an unpadded sentence: drop the padded positions (attention_mask == 0).")
    n = ids.shape[1]
    row_idx = _check_rows(rows, n)
    row_idx = np.arange(n) if row_idx is None else row_idx
    L = len(mods)
    todo = list(range(L)) if layers is None else sorted({int(k) % L for k in layers})
    if layers is not None and any(not -L <= int(k) < L for k in layers):
        raise InputError(f"layers={list(layers)} out of range for a model with {L} layers (0..{L - 1}).")
    device = model_device(model)
    calls = record_layer_calls(model, ids.to(device), mask.to(device))
    out = np.full((L, n, n), np.nan)
    for k in todo:
        args, kwargs, expected = calls[k]
        f, x = _replay(mods[k].layer, args, kwargs)
        c = _layer_hta(f, x.detach(), expected[0].detach(), row_idx, times_input, chunk_size, atol)
        if normalize:
            total = c.sum(axis=-1, keepdims=True)
            c = np.where(total > 0, c / np.where(total > 0, total, 1.0), np.nan)
        out[k][row_idx] = c
    return out
