r"""Hidden Token Attribution by automatic differentiation (``hta(method="autograd")``, and the
fallback of the closed form of :mod:`cmixlib.methods.hta` for a layer it does not reproduce):
the layer module re-run exactly as the model called it (:func:`replay_layer`) and the rows of
its Jacobian taken as vmapped vector-Jacobian products (:func:`autograd_layer_hta`),

.. math:: c_{i \leftarrow j} = \Big\lVert \frac{\partial o_i}{\partial x_j} \odot x_j
          \Big\rVert_F .
"""
from __future__ import annotations

import numpy as np
import torch
from torch.func import vjp, vmap

from cmixlib.forward.encoder import layer_output

__all__ = ["HTAError", "replay_layer", "autograd_layer_hta"]


class HTAError(RuntimeError):
    """The layer could not be replayed exactly (e.g. the model is in training mode)."""


def replay_layer(layer: torch.nn.Module, args: tuple, kwargs: dict):
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


def autograd_layer_hta(f, x: torch.Tensor, expected: torch.Tensor, rows: np.ndarray, times_input: bool,
               chunk_size: int, atol: float) -> np.ndarray:
    """``c[r, j]`` for the output rows ``rows`` of one layer, (len(rows), n), by vmapped
    vector-Jacobian products of ``f`` (:func:`replay_layer`) at ``x``: row (i, a) of the Jacobian
    per product, each scaled by ``x`` (``times_input``) and summed in squares over (a, b).
    ``expected``: the model's own output, which ``f(x)`` must reproduce within ``atol``
    (relative to its largest value), else :class:`HTAError`."""

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
