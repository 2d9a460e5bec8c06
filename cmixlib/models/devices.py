"""Where models run: the device a run asks for (``$CMIX_DEVICE``, :func:`use_device`), checked,
and the device a model's parameters are on. :func:`cmixlib.load_model` puts models on
:func:`default_device`; every cmixlib function works where the model is (:func:`model_device`).
"""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Any

import torch

from cmixlib.validation import InputError, describe

DEVICE_ENV_VAR = "CMIX_DEVICE"
_device_override: list[str] = []      # set by use_device (a run's ``device`` option)
_DEVICE = re.compile(r"(cpu|cuda(:\d+)?|auto)?")


def check_device_name(device: Any, name: str = "device") -> str:
    """``device`` as lower-case text: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, ``"auto"`` or ``""``
    (None, auto: CUDA when available). A ``torch.device`` is accepted; anything else is an error
    (TypeError for a non-string). Whether the device exists is :func:`resolve_device`'s question."""
    if device is None:
        return ""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{name} must be a string (cpu, cuda or cuda:N) or a torch.device; got "
                        f"{describe(device)}.")
    text = str(device).strip().lower()
    if not _DEVICE.fullmatch(text):
        raise InputError(f"Unknown device {device!r}: {name} must be cpu, cuda or cuda:N (or auto).")
    return text


def resolve_device(device: str | torch.device | None = None, *, name: str = "device") -> torch.device:
    """The device ``device`` names (``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device``; None,
    ``""`` or ``"auto"``: CUDA when available, else CPU), checked: another name is an
    :class:`~cmixlib.InputError` naming ``name`` (TypeError for a non-string), and so is asking
    for CUDA without it."""
    text = check_device_name(device, name)
    if text in ("", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(text)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"Device {device!r} asked for, but PyTorch sees no CUDA GPU here: use "
                             f"cpu (or unset ${DEVICE_ENV_VAR} / the device option).")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"Device {device!r} asked for, but there are only "
                             f"{torch.cuda.device_count()} CUDA device(s).")
    return dev


def default_device() -> torch.device:
    """Where :func:`load_model` puts models: the device of the innermost :func:`use_device`
    (a run's ``device`` option), else ``$CMIX_DEVICE`` (cpu, cuda, cuda:N), else CUDA when
    available and CPU otherwise. The only place that reads ``$CMIX_DEVICE``."""
    if _device_override:
        return resolve_device(_device_override[-1])
    return resolve_device(os.environ.get(DEVICE_ENV_VAR), name=f"${DEVICE_ENV_VAR}")


@contextmanager
def use_device(device: str | torch.device | None):
    """``with use_device("cpu"): ...``: models loaded inside go to ``device`` (None: no change)."""
    if device is None:
        yield
        return
    resolve_device(device)                       # a bad name fails here, before any work
    _device_override.append(str(device))
    try:
        yield
    finally:
        _device_override.pop()


def model_device(model: torch.nn.Module) -> torch.device:
    """The device holding the model's parameters (CPU for a model without parameters)."""
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")
