r"""Where attributions are taken: the hooked modules of each level and the layer-wise functions.

Owns :data:`LEVELS`, :func:`attribution_layers`, :func:`substitute_word_embeddings` and the
functions :math:`f(h_\ell)` of one hidden state that layer-wise IG and DeepLift differentiate.

**Input level** (``level="input"``): :math:`x_j` is the output of the **word-embedding** module
(``model.get_input_embeddings()``), *before* position/token-type embeddings and LayerNorm. Captum's
``Layer*`` classes hook that module's output, so positions and LayerNorm are applied exactly once
(the authors' code fed the whole embedding-module output back as ``inputs_embeds``, which applies
them twice; we never do that). For ELECTRA, :math:`x_j` has ``embedding_size`` dimensions.

**Layer-wise** (``level="layers"``): row :math:`\ell` (:math:`\ell = 0..L-1`) attributes to the
representations **entering** encoder layer :math:`\ell`, i.e. ``hidden_states[ℓ]`` of a Hugging
Face forward with ``output_hidden_states=True``: the output of
:func:`cmixlib.models.arch.embedding_output_module` (after LayerNorm, and after ELECTRA's projection) for
:math:`\ell=0`, the output of layer :math:`\ell-1` otherwise. This matches the Value Zeroing
figures (the map of layer :math:`\ell` says which input tokens of that layer feed the target);
row 0 is GlobEnc/DecompX's "gradient × ``hidden_states[0]``" saliency. Captum hooks the *output*
of the module that produces ``hidden_states[ℓ]``.

**Layer-wise functions.** For an MLM, :math:`f(h_\ell)` runs the encoder blocks
:math:`\ell..L-1` as the model calls them (masks recorded by
:func:`cmixlib.forward.encoder.record_layer_calls`), then the head at the target position only:
:math:`f(h_\ell) = \mathrm{score}(\mathrm{block}_{L-1} \circ \dots \circ
\mathrm{block}_\ell(h_\ell))`, the last block's FFN at the target row only
(``target_rows.target_row_ffn``). Every call checks it against the model's own logits
(``check_tail``, on the batch's first row). For a classifier the whole model runs with
``hidden_states[ℓ]`` replaced by :math:`h_\ell` (heads differ too much between architectures to
call them directly).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import torch
from torch import nn

from cmixlib.models import arch
from cmixlib.forward.encoder import layer_output, record_layer_calls
from cmixlib.gradients.target_rows import last_ffn_in, target_row_ffn
from cmixlib.gradients.scores import class_score, mlm_score
from cmixlib.gradients.targets import GradientAttributionError, Target, output_logits, target_score

__all__ = ["Level", "LEVELS", "attribution_layers", "substitute_word_embeddings"]

Level = Literal["input", "layers"]
#: Where a gradient method explains: ``"input"`` (the word embeddings :math:`e_j`) or ``"layers"``
#: (every layer's input :math:`x_j`).
LEVELS: tuple[str, ...] = ("input", "layers")


def check_level(level: str) -> None:
    if level not in LEVELS:
        raise GradientAttributionError(f"Unknown level {level!r}; choose one of {LEVELS}.")


def attribution_layers(model: nn.Module, level: Level) -> list[nn.Module]:
    """Modules whose *outputs* captum hooks: the word embeddings for ``"input"``; for
    ``"layers"``, the modules producing ``hidden_states[0..L-1]`` (the inputs of layers 0..L-1)."""
    if level == "input":
        return [model.get_input_embeddings()]
    check_level(level)
    return [arch.embedding_output_module(model)] + arch.layer_list(model)[:-1]


@contextlib.contextmanager
def substitute_word_embeddings(model: nn.Module, word_embeds: torch.Tensor) -> Iterator[None]:
    """Within the block, the word-embedding module returns ``word_embeds`` instead of its output.

    The rest of the forward (positions, token types, LayerNorm, encoder, head) is untouched, so
    ``model(input_ids=ids)`` inside the block computes :math:`f` at word embeddings ``word_embeds``.
    ``word_embeds`` must have the shape of the module's output, ``(batch, n, d_emb)``.
    """
    def hook(module, inputs, output):
        if output.shape != word_embeds.shape:
            raise GradientAttributionError(
                f"word_embeds has shape {tuple(word_embeds.shape)}, the embedding output "
                f"{tuple(output.shape)}.")
        return word_embeds

    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


class WordEmbeddingScore(nn.Module):
    """``score(input_ids, attention_mask, *targets)`` as a function of the word embeddings
    (:func:`substitute_word_embeddings`): what captum's ``LayerIntegratedGradients`` on the
    word-embedding module integrates, for plain ``IntegratedGradients`` given the embeddings,
    without the two forwards that the layer version runs only to read them."""

    def __init__(self, model: nn.Module, score: nn.Module):
        super().__init__()
        self.model, self.score = model, score

    def forward(self, word_embeds, input_ids, attention_mask, *targets):
        with substitute_word_embeddings(self.model, word_embeds):
            return self.score(input_ids, attention_mask, *targets)


# --------------------------------------------------------------------------------------------
# Layer-wise functions f(h_l): the rest of the network from hidden_states[l]
# --------------------------------------------------------------------------------------------
@dataclass
class LayerCalls:
    """What the encoder passed to each block besides the hidden states (masks...), captured by a
    pre-hook on a real forward, with its tensors pulled out so captum can expand them per step."""

    calls: list[tuple[list, dict]]      # per block: (positional args after h, keyword args)
    tensors: list[torch.Tensor]          # every tensor in `calls`, in order (replaced by slots)

    def rebuild(self, k: int, tensors: Sequence[torch.Tensor]) -> tuple[list, dict]:
        args, kwargs = self.calls[k]
        pick = lambda v: tensors[v.index] if isinstance(v, _Slot) else v  # noqa: E731
        return [pick(a) for a in args], {key: pick(v) for key, v in kwargs.items()}


@dataclass(frozen=True)
class _Slot:
    index: int


def hidden_states_and_calls(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor,
                             extras: dict | None = None,
                             ) -> tuple[list[torch.Tensor], LayerCalls]:
    """``hidden_states[0..L-1]`` (each block's input) and the other arguments of each block call
    (:func:`cmixlib.forward.encoder.record_layer_calls`, with the extra inputs ``extras``), tensors moved
    into slots."""
    inputs: list[torch.Tensor] = []
    calls: list[tuple[list, dict]] = []
    tensors: list[torch.Tensor] = []

    def slot(v):
        if torch.is_tensor(v):
            tensors.append(v)
            return _Slot(len(tensors) - 1)
        return v

    for args, kwargs, _ in record_layer_calls(model, ids, mask, **(extras or {})):
        kwargs = dict(kwargs)
        if args:
            h, rest = args[0], list(args[1:])
        else:
            h, rest = kwargs.pop("hidden_states"), []
        inputs.append(h)
        calls.append(([slot(a) for a in rest], {key: slot(v) for key, v in kwargs.items()}))
    return inputs, LayerCalls(calls, tensors)


class MLMTail(nn.Module):
    """``f(h, position, target, foil, *call_tensors)`` for ``h = hidden_states[start]`` of an MLM:
    the encoder blocks ``start..L-1`` called as the model calls them, then the head at the target
    only. Running only the remaining blocks is what makes layer-wise IG/DeepLift affordable.

    With ``tap=True`` the gradient reaching each ``hidden_states[k]`` (``k > start``) in the
    backward pass is kept in ``tapped[k]`` (DeepLift: the multipliers at layer ``k``)."""

    def __init__(self, model: nn.Module, start: int, calls: LayerCalls, kind: str, tap: bool = False):
        super().__init__()
        self.model = model
        self.start = start
        self.blocks = arch.layer_list(model)
        self.calls = calls
        self.kind = kind
        self.tapped: dict[int, torch.Tensor] | None = {} if tap else None
        self.last_ffn_in = last_ffn_in(model)   # the last block's FFN at the target rows only

    def forward(self, h, position, target, foil, *tensors):
        last = len(self.blocks) - 1
        for k, blk in enumerate(self.blocks[self.start:], start=self.start):
            if self.tapped is not None and k > self.start and h.requires_grad:
                h.register_hook(lambda g, k=k: self.tapped.__setitem__(k, g))
            args, kwargs = self.calls.rebuild(k, tensors)
            with target_row_ffn(self.last_ffn_in if k == last else None, position, h.shape[1]):
                out = blk(h, *args, **kwargs)
            h = layer_output(out)
        return mlm_score(self.model, h, position, target, foil, self.kind)


class SubstitutedForward(nn.Module):
    """``f(h, position, target, foil, input_ids, attention_mask, *extras)`` for any model: the
    full forward on ``input_ids`` (with the extra inputs named ``extra_names``) with
    ``hidden_states[start]`` replaced by ``h`` (used for classifiers)."""

    def __init__(self, model: nn.Module, start: int, kind: str, extra_names=()):
        super().__init__()
        self.model = model
        self.layer = attribution_layers(model, "layers")[start]
        self.kind = kind
        self.extra_names = tuple(extra_names)

    def forward(self, h, position, target, foil, input_ids, attention_mask, *extras):
        kw = dict(zip(self.extra_names, extras, strict=True))

        def hook(module, inputs, output):
            return (h,) + tuple(output[1:]) if isinstance(output, tuple) else h

        handle = self.layer.register_forward_hook(hook)
        try:
            logits = output_logits(self.model(input_ids=input_ids, attention_mask=attention_mask, **kw))
        finally:
            handle.remove()
        return class_score(logits, target, self.kind)


def check_tail(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, targets: Sequence[Target],
                got: torch.Tensor, extras: dict | None = None) -> None:
    """Raise if the fast layer-wise function disagrees with the model's own logits at the input
    (checked on the first row of the batch: the full-vocabulary logits are costly)."""
    with torch.no_grad():
        kw = {k: v[:1] for k, v in (extras or {}).items()}
        logits = output_logits(model(input_ids=ids[:1], attention_mask=mask[:1], **kw))
        want = target_score(logits, targets[0])
        got = got[:1]
    tol = 1e-4 if got.dtype == torch.float32 else 1e-8
    if not torch.allclose(got.detach().to(want.dtype), want, rtol=tol, atol=tol):
        raise GradientAttributionError(
            f"The layer-wise score of {type(model).__name__} does not reproduce the model's logits "
            f"(max difference {float((got.detach() - want).abs().max()):.3g}): this architecture is "
            "not supported by the layer-wise IG/DeepLift path.")
