"""Tiny random models (tests, benchmarks, exercises), built from configs: nothing is downloaded.

:func:`random_model` builds a small encoder of any family of :data:`cmixlib.models.arch.FAMILIES`
with randomised LayerNorm gains and biases (:func:`perturb_norms_and_biases`), so that no
method's handling of them is tested against the trivial 1 and 0.
"""
from __future__ import annotations

import torch

from cmixlib.models.arch import FAMILIES, random_config
from cmixlib.models.hub import TASKS, auto_class
from cmixlib.validation import InputError, check_choice, check_float_dtype, check_int, check_positive_int

RANDOM_ARCHS = tuple(FAMILIES)


def random_model(arch: str = "bert", *, task: str = "base", hidden: int = 32, layers: int = 2,
                 heads: int = 4, intermediate: int | None = None, vocab: int = 120, seed: int = 0,
                 dtype: torch.dtype = torch.float32, **config_overrides):
    """A randomly initialised small encoder of architecture ``arch`` (eager attention, eval mode).

    LayerNorm gains/biases and all linear biases are randomised too (the HF defaults of 1 and 0
    would hide bugs in bias and gain handling). ``arch`` is one of ``cmixlib.models.random_models.RANDOM_ARCHS``
    (``"bert"``, ``"roberta"``, ``"electra"``, ``"distilbert"``); the same ``seed`` gives the same
    weights. The tests and the docstring examples compare every method on such models.

    ``task`` is ``"base"``, ``"mlm"`` or ``"sequence-classification"``; ``hidden``, ``layers``,
    ``heads``, ``vocab`` (and ``intermediate``, None: ``4 * hidden``) are integers >= 1 with
    ``hidden`` divisible by ``heads``; ``seed`` an integer; ``dtype`` a floating
    ``torch.dtype``. Anything else raises :class:`~cmixlib.InputError` naming the argument (a
    wrong type TypeError).

    Examples
    --------
    >>> import cmixlib
    >>> model = cmixlib.random_model("roberta", layers=3, hidden=16, heads=2)
    >>> model.config.model_type, model.config.num_hidden_layers, model.config.hidden_size
    ('roberta', 3, 16)
    >>> mlm = cmixlib.random_model("electra", task="mlm")
    >>> type(mlm).__name__
    'ElectraForMaskedLM'
    """
    check_choice(arch, RANDOM_ARCHS, "arch", what="architecture")
    check_choice(task, TASKS, "task")
    for label, value in (("hidden", hidden), ("layers", layers), ("heads", heads), ("vocab", vocab)):
        check_positive_int(value, label)
    check_positive_int(intermediate, "intermediate", allow_none=True)
    check_int(seed, "seed")
    check_float_dtype(dtype)
    if hidden % heads:
        raise InputError(f"hidden={hidden} is not divisible by heads={heads}: each head gets hidden / heads "
                         f"dimensions (e.g. hidden={heads * max(1, hidden // heads)}).")
    intermediate = intermediate or 4 * hidden
    cfg = random_config(arch, hidden=hidden, layers=layers, heads=heads,
                        intermediate=intermediate, vocab=vocab)
    for key, value in config_overrides.items():
        setattr(cfg, key, value)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = auto_class(task).from_config(cfg, attn_implementation="eager")
    perturb_norms_and_biases(model)
    return model.to(dtype).eval()


@torch.no_grad()
def perturb_norms_and_biases(model: torch.nn.Module) -> None:
    """In place: LayerNorm gains ~ U[0.5, 1.5], LayerNorm and linear biases ~ N(0, 0.1) (torch's
    global generator). A fresh model's gains of 1 and biases of 0 would hide mistakes in their
    handling and give analyses of them (GlobEnc's LayerNorm outliers) constant inputs."""
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.weight.uniform_(0.5, 1.5)
            module.bias.normal_(0.0, 0.1)
        elif isinstance(module, torch.nn.Linear) and module.bias is not None:
            module.bias.normal_(0.0, 0.1)
