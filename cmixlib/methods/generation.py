"""Generation-time attribution: explain each generated token of a continuation.

For a prompt w_0 .. w_{n-1} (BOS rule of :mod:`cmixlib.forward.decoder_inputs`) and a continuation
g_0 .. g_{k-1} (greedy, g_t = argmax_v z_{n-1+t}(v), or given), step t is the prediction of
g_t at position p_t = n - 1 + t from the sources s = (w_0, .., w_{n-1}, g_0, .., g_{t-1}).
Its attribution is, for every method M and layer l, the map row

    R^M_l[t, j] = M_l(s_0 .. s_{p_t})[p_t, j],   j <= p_t   (0 for j > p_t),

i.e. the row of the predicting position of :func:`cmixlib.context_mixing` run on the prefix
alone, and its step scores are the logit z_{p_t}(g_t) and the probability
softmax(z_{p_t})(g_t) of the generated token. ALTI-Logit's target at step t is g_t (its row is
in logit units, not normalised).

Computation: because every map of a causal decoder is causal (row i reads only positions
j <= i, and a rollout multiplies lower-triangular matrices), all k rows are read from ONE run on
s_0 .. s_{n+k-2} (the prompt and every generated token but the last) with the rows p_0 ..
p_{k-1}: equal, up to rounding, to k runs on the prefixes (tested against those runs on tiny
float64 models). Prompts of a batch are generated and explained one by one, unpadded (a padded
``{"input_ids", "attention_mask"}`` batch is unpadded by its mask, left or right), so padding
never enters a forward pass. Greedy generation runs exactly ``max_new_tokens`` steps (an EOS is
kept like any token; generation does not stop at it).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from cmixlib.forward.decoder_inputs import decoder_sentences
from cmixlib.methods.decoder import check_decoder_methods
from cmixlib.methods.dispatch import context_mixing
from cmixlib.methods.options import (AltiLogit, MixingMethod, refuse_moved_options,
                                     resolve_methods)
from cmixlib.validation import InputError

__all__ = ["GenerationAttribution", "greedy_continuation", "attribute_generation"]


@dataclass
class GenerationAttribution:
    """The attribution of one prompt's continuation.

    ``prompt_ids`` (n,), ``generated_ids`` (k,); ``maps[method]`` (L, k, n + k - 1): row t is
    step t's map row over the sources (prompt + generated tokens), exactly 0 beyond position
    n - 1 + t; ``logit`` / ``probability`` (k,): z_{p_t}(g_t) and softmax(z_{p_t})(g_t);
    ``tokens``: the token strings of prompt + continuation (ids as strings without a
    tokenizer)."""

    prompt_ids: np.ndarray
    generated_ids: np.ndarray
    maps: dict[str, np.ndarray]
    logit: np.ndarray
    probability: np.ndarray
    tokens: list[str] = field(default_factory=list)

    @property
    def n_prompt(self) -> int:
        return len(self.prompt_ids)

    @property
    def steps(self) -> int:
        return len(self.generated_ids)

    def step_row(self, method: str, step: int, layer: int = -1) -> np.ndarray:
        """Step ``step``'s row of ``method`` at ``layer`` over its n + step sources."""
        return self.maps[method][layer, step, : self.n_prompt + step]

    def step_scores(self) -> Any:
        """A DataFrame, one row per step: token, id, logit, probability."""
        import pandas as pd

        n = self.n_prompt
        return pd.DataFrame({"step": np.arange(self.steps), "token": self.tokens[n:],
                             "id": self.generated_ids, "logit": self.logit,
                             "probability": self.probability})


def _token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    if tokenizer is None:
        return [str(int(i)) for i in ids]
    return list(tokenizer.convert_ids_to_tokens([int(i) for i in ids]))


@torch.no_grad()
def greedy_continuation(model: torch.nn.Module, prompt: torch.Tensor, max_new_tokens: int
                        ) -> torch.Tensor:
    """g_t = argmax_v z_{n-1+t}(v), t < ``max_new_tokens``, on one unpadded prompt (n,): each
    step one full forward pass on the prompt and the tokens so far (no key-value cache, whose
    API changes between transformers versions; the first maximal id on ties, as
    ``torch.argmax``); no EOS stop."""
    device = next(model.parameters()).device
    ids = torch.as_tensor(prompt).reshape(1, -1).to(device)
    new: list[int] = []
    for _ in range(max_new_tokens):
        nxt = model(input_ids=ids, use_cache=False).logits[0, -1].argmax()
        new.append(int(nxt))
        ids = torch.cat([ids, nxt.reshape(1, 1)], dim=1)
    return torch.tensor(new, dtype=torch.long)


def _continuations(continuation: Any, tokenizer: Any, count: int, vocab: int
                   ) -> list[torch.Tensor]:
    """One id tensor per prompt from a given continuation: a string or a sequence of ids for
    one prompt (the same for every prompt of a batch), or a list of those, one per prompt.
    Strings are tokenized alone, without special tokens."""
    def one(value: Any, name: str) -> torch.Tensor:
        if isinstance(value, str):
            if tokenizer is None:
                raise InputError(f"{name} is text: pass the tokenizer, or ids.")
            value = tokenizer(value, add_special_tokens=False)["input_ids"]
        ids = torch.as_tensor(value, dtype=torch.long).reshape(-1)
        if ids.numel() == 0:
            raise InputError(f"{name} is empty: give at least one token.")
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise InputError(f"{name} holds ids outside the vocabulary [0, {vocab}).")
        return ids

    per_prompt = isinstance(continuation, (list, tuple)) and len(continuation) == count \
        and all(isinstance(c, (str, list, tuple, torch.Tensor, np.ndarray))
                for c in continuation)
    if per_prompt:
        return [one(c, f"continuation[{b}]") for b, c in enumerate(continuation)]
    if count > 1 and isinstance(continuation, (list, tuple)) and continuation \
            and not isinstance(continuation[0], (int, np.integer)):
        raise InputError(f"continuation for a batch of {count} prompts must be one "
                         f"continuation or a list of {count}; got {len(continuation)}.")
    return [one(continuation, "continuation")] * count


@torch.no_grad()
def attribute_generation(model: torch.nn.Module, tokenizer: Any, text: Any,
                         methods: Sequence[str] | str | None = None, *,
                         max_new_tokens: int = 5, continuation: Any = None,
                         normalize: bool = True, **moved: Any
                         ) -> GenerationAttribution | list[GenerationAttribution]:
    """Explain each generated token (module docstring: R^M_l[t, j] is the row of the
    predicting position p_t = n - 1 + t over the sources j <= p_t, as the prefix alone gives it).

    ``text``: a prompt, a list of prompts, or ids (``{"input_ids", "attention_mask"}``, padded
    left or right; without a tokenizer used exactly as given). ``continuation=None``: greedy,
    ``max_new_tokens`` steps (:func:`greedy_continuation`); else the given continuation (text
    tokenized alone, or ids; one for all prompts or one per prompt). ``methods``: as
    :func:`cmixlib.context_mixing`: names or method objects with their options (None: every
    method, ALTI-Logit with an LM head, its target the generated token: an ``AltiLogit``
    given here takes no target or foil); ``normalize`` as there.
    Returns one :class:`GenerationAttribution` (a list for a batch).

    Examples
    --------
    >>> import torch
    >>> from cmixlib.forward.decoder import random_decoder
    >>> from cmixlib.methods.generation import attribute_generation
    >>> res = attribute_generation(random_decoder("llama"), None,
    ...                            {"input_ids": torch.arange(5)}, ["alti"], max_new_tokens=3)
    >>> res.maps["alti"].shape, res.step_row("alti", 2).shape
    ((3, 3, 7), (7,))
    """
    if "rows" in moved:
        raise InputError("rows are set by attribute_generation (the predicting rows); leave "
                         "them out.")
    refuse_moved_options("attribute_generation", moved)
    names, options = resolve_methods(methods)
    if (options["logit_target"], options["logit_foil"]) != (None, None):
        raise InputError("AltiLogit's target is set by attribute_generation (the generated "
                         "tokens); pass AltiLogit() or 'alti_logit' without target or foil.")
    if model.training:
        raise InputError("model is in training mode (dropout is active): call model.eval().")
    names = check_decoder_methods(names, hasattr(model, "lm_head"))
    given = [methods] if isinstance(methods, (str, MixingMethod)) else methods or names
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) \
            or max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be a positive int; got {max_new_tokens!r}.")
    prompts, is_batch = decoder_sentences(model, tokenizer, text)
    vocab = model.get_input_embeddings().weight.shape[0]
    if continuation is None:
        conts = [greedy_continuation(model, p, max_new_tokens) for p in prompts]
    else:
        conts = _continuations(continuation, tokenizer, len(prompts), vocab)
    limit = int(getattr(model.config, "max_position_embeddings", 0) or 0)
    results = []
    device = next(model.parameters()).device
    for prompt, gen in zip(prompts, conts):
        prompt, gen = prompt.cpu(), gen.cpu()
        n, k = len(prompt), len(gen)
        seq = torch.cat([prompt, gen[:-1]])
        if limit and len(seq) > limit:
            raise InputError(f"prompt + continuation has {len(seq) + 1} tokens; the model "
                             f"accepts at most {limit}.")
        rows = list(range(n - 1, n + k - 1))
        target = torch.cat([seq[1:], gen[-1:]])       # each row's next (generated) token
        asked = [AltiLogit(target=target) if name == "alti_logit" else m
                 for m, name in zip(given, names)]
        maps = context_mixing(model, None, {"input_ids": seq}, asked, rows=rows,
                              normalize=normalize)
        logits = model(input_ids=seq.reshape(1, -1).to(device), use_cache=False
                       ).logits[0, n - 1:].double()
        z = logits.gather(1, gen.to(device).reshape(-1, 1))[:, 0]
        prob = (z - logits.logsumexp(dim=1)).exp()
        results.append(GenerationAttribution(
            prompt_ids=prompt.numpy(), generated_ids=gen.numpy(),
            maps={m: np.ascontiguousarray(v[:, rows]) for m, v in maps.items()},
            logit=z.cpu().numpy(), probability=prob.cpu().numpy(),
            tokens=_token_strings(tokenizer, torch.cat([prompt, gen]).tolist())))
    return results if is_batch else results[0]
