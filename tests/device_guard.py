"""A CPU-only stand-in for "the model is on another device": :class:`HostTracker`.

On CUDA, feeding a CPU tensor to a CUDA model (or mixing the two in one op) is an error; on a
machine without a GPU everything is on the CPU and such mistakes pass silently. The tracker marks
every tensor built without an explicit ``device`` (``torch.tensor(...)``, ``zeros``, ``arange``,
``from_numpy``, a tokenizer's ``return_tensors="pt"``, ...) as a *host* tensor, and tensors made
from host tensors only stay host. ``.to(<device>)`` / ``.cuda()`` make a tensor *placed*;
``.cpu()`` and ``.to("cpu")`` make it host again; the model's parameters and everything computed
from them are placed. An op that mixes a host tensor of one or more dimensions with a placed one
is exactly what would fail on CUDA (indexing a placed tensor with host indices, and ``copy_``,
are allowed, as on CUDA): the tracker records it with the first ``cmixlib`` frame of the stack.
Build the models *before* entering the tracker (their parameters and buffers must not be host).

Limits: on a CPU-only machine the model's device *is* the CPU, so ``.to("cpu")`` (a string) counts
as bringing a result back and ``.to(<torch.device>)`` as a move to the model's device, whatever
the device; 0-dimensional host tensors mix freely, as on CUDA.
"""
from __future__ import annotations

import traceback

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

_FACTORIES = {torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.full, torch.empty,
              torch.arange, torch.eye, torch.linspace, torch.logspace, torch.rand, torch.randn,
              torch.randint, torch.randperm, torch.from_numpy, torch.asarray, torch.tril_indices,
              torch.triu_indices, torch.empty_strided, torch.scalar_tensor}
_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.index_select,
             torch.index_select, torch.Tensor.gather, torch.gather,
             torch.Tensor.copy_}               # copy_ crosses devices on CUDA too
_FLAG = "_cmix_host"


def is_host(t) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, _FLAG, False)


def _cmix_frame() -> str:
    for fr in reversed(traceback.extract_stack()[:-3]):
        if "/cmixlib/" in fr.filename:
            return f"{fr.filename.split('/cmixlib/')[-1]}:{fr.lineno} {fr.line}"
    return "<outside cmixlib>"


def _mark(out, host: bool):
    def f(t):
        if isinstance(t, torch.Tensor):
            try:
                setattr(t, _FLAG, host)
            except (AttributeError, RuntimeError):
                pass
        return t
    tree_map(f, out)
    return out


def _moved(src, out, host: bool):
    """The result of a move. On one device ``.to``/``.cpu`` return the tensor itself; on two
    they return a copy and the original stays where it was, so the move gets a view of its own
    (marking ``src`` would hide a later use of the unmoved original)."""
    if out is src and is_host(src) != host:
        out = src.view_as(src)
    return _mark(out, host)


class HostTracker(TorchFunctionMode):
    """``with HostTracker() as tr: ...``; then ``tr.violations`` lists the ops that would mix
    CPU and CUDA tensors if the model were on CUDA (file:line and op)."""

    def __init__(self):
        super().__init__()
        self.violations: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _FACTORIES:
            first = args[0] if args else kwargs.get("data")
            if kwargs.get("device") is not None:
                return _mark(out, False)
            if func in (torch.as_tensor, torch.asarray, torch.tensor) and isinstance(first, torch.Tensor):
                return _mark(out, is_host(first))
            return _mark(out, True)
        name = getattr(func, "__name__", "")
        if name in ("cpu",):
            return _moved(args[0], out, True)
        if name in ("cuda",):
            return _moved(args[0], out, False)
        if name == "to":
            target = [a for a in list(args[1:]) + [kwargs.get("device")]
                      if isinstance(a, (str, torch.device, torch.Tensor))]
            if target:
                t = target[0]
                # the string "cpu" is how cmixlib brings results back; a torch.device is
                # model_device(model) (or a tensor's .device): a move to the model's device
                host = is_host(t) if isinstance(t, torch.Tensor) else (isinstance(t, str) and t == "cpu")
                return _moved(args[0], out, host)
            return _mark(out, is_host(args[0]))
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        if not tensors:
            return out
        host = [t for t in tensors if is_host(t)]
        placed = [t for t in tensors if not is_host(t)]
        if func in _INDEXING and tensors and not is_host(tensors[0]):
            # a placed tensor indexed with host indices (and, for __setitem__, assigned a
            # host value: a copy) is allowed on CUDA
            host = []
        if func in _INDEXING and tensors and is_host(tensors[0]) and name == "__setitem__":
            host = []                  # storing placed values into a CPU result is a copy
        if any(t.dim() > 0 for t in host) and placed:
            self.violations.append(f"{_cmix_frame()}  [{name or func}]")
        return _mark(out, bool(host) and not placed)
