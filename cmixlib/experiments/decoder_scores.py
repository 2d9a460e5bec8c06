"""Batched forward passes of a causal LM for chapter 16's experiment
(:mod:`cmixlib.experiments.decoder`), right-padded (a causal model's real positions never see the
pads): the sum of a sentence's next-token log-probabilities (:func:`sentence_logprobs`) and
blank-out at the prediction position, by deleting or replacing one token at a time
(:func:`blank_out_scores`)."""
from __future__ import annotations

import inspect
from typing import Mapping, Sequence

import numpy as np
import torch

from cmixlib.forward.batching import length_batches, pad_sequences
from cmixlib.validation import InputError

__all__ = ["BLANK_MODES", "causal_forward", "sentence_logprobs", "blank_out_scores"]

#: How blank-out removes token j: "delete" it (the sequence is one shorter) or replace it by the
#: tokenizer's unknown token ("unk").
BLANK_MODES = ("delete", "unk")


def causal_forward(model, seqs: Sequence[Sequence[int]], pad_id: int, *,
                   positions: Sequence[int] | None = None, **kw):
    """``(output, ids, mask, column)`` of one right-padded batch. ``positions``: the only
    positions whose logits are read; the LM head then runs on those alone (``logits_to_keep``,
    where the model takes it), and the logits of position p are ``output.logits[:, column[p]]``
    (``column[p]`` is p when every position is kept)."""
    device = next(model.parameters()).device
    ids, mask = pad_sequences(seqs, int(pad_id), device=device)
    kept = list(range(ids.shape[1]))
    if positions is not None and "logits_to_keep" in inspect.signature(model.forward).parameters:
        kept = sorted({int(p) for p in positions})
        kw["logits_to_keep"] = torch.as_tensor(kept, device=device)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, use_cache=False, **kw)
    return out, ids, mask, {p: k for k, p in enumerate(kept)}


def sentence_logprobs(model, seqs: Sequence[Sequence[int]], pad_id: int = 0,
                      batch: int = 32) -> np.ndarray:
    r"""Sum of next-token log-probabilities of each sequence after its first token,
    :math:`\sum_{k=1}^{n-1} \log p(w_k \mid w_{<k})`, batched by length (right-padded)."""
    out = np.zeros(len(seqs))
    for idx in length_batches([len(s) for s in seqs], batch):
        res, ids, mask, _ = causal_forward(model, [seqs[i] for i in idx], pad_id)
        logp = torch.log_softmax(res.logits[:, :-1].double(), -1)
        got = logp.gather(-1, ids[:, 1:, None])[..., 0] * mask[:, 1:]
        out[idx] = got.sum(1).cpu().numpy()
    return out


def _logit_differences(model, seqs: Sequence[Sequence[int]], target: Sequence[int],
                       foil: Sequence[int], pad_id: int, batch: int) -> np.ndarray:
    """lambda_t - lambda_f at each sequence's last position, batched."""
    out = np.zeros(len(seqs))
    for k in range(0, len(seqs), batch):
        part = seqs[k:k + batch]
        last = [len(q) - 1 for q in part]
        res, _, _, column = causal_forward(model, part, pad_id, positions=last)
        col = torch.as_tensor([column[p] for p in last], device=res.logits.device)
        lg = res.logits[torch.arange(len(part), device=col.device), col].double()
        t = torch.as_tensor(target[k:k + batch], device=lg.device)
        f = torch.as_tensor(foil[k:k + batch], device=lg.device)
        out[k:k + len(part)] = (lg.gather(1, t[:, None]) - lg.gather(1, f[:, None]))[:, 0].cpu()
    return out


def blank_out_scores(model, examples: Sequence[Mapping], blank: str = "delete", *,
                     unk_id: int | None = None, pad_id: int = 0,
                     batch: int = 64) -> list[np.ndarray]:
    r"""Blank-out at the prediction position of each example, one score per token j:
    :math:`s^{BO}_j = \Delta(w) - \Delta(w_{\setminus j})`, :math:`\Delta = \lambda_t -
    \lambda_f` at the last position, token j deleted (``blank="delete"``; the sequence is one
    shorter) or replaced by ``unk_id`` (``"unk"``). Every variant of every example in batches
    of ``batch`` right-padded sequences (the clean sequence in the same batches, so both
    Deltas carry the same rounding). Returns one (n,) array per example."""
    if blank not in BLANK_MODES:
        raise InputError(f"blank must be one of {BLANK_MODES}, not {blank!r}.")
    if blank == "unk" and unk_id is None:
        raise InputError("blank='unk' needs the tokenizer's unknown token (unk_id); this "
                         "tokenizer has none: use blank='delete'.")
    seqs, tgt, foil, owner = [], [], [], []
    for e, ex in enumerate(examples):
        ids = list(ex["input_ids"])
        variants = [ids] + [ids[:j] + ids[j + 1:] if blank == "delete"
                            else ids[:j] + [int(unk_id)] + ids[j + 1:] for j in range(len(ids))]
        seqs += variants
        tgt += [int(ex["target_id"])] * len(variants)
        foil += [int(ex["foil_id"])] * len(variants)
        owner += [e] * len(variants)
    if any(len(s) == 0 for s in seqs):
        raise InputError("An example of one token cannot be blanked out by deletion.")
    delta = _logit_differences(model, seqs, tgt, foil, pad_id, batch)
    owner_arr = np.asarray(owner)
    out = []
    for e in range(len(examples)):
        d = delta[owner_arr == e]
        out.append(d[0] - d[1:])
    return out
