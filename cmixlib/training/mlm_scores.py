"""Reading a masked LM's head: vocabulary logits from hidden states or at one position per row,
the head's own parameters, and the agreement score ``logit(target) - logit(foil)`` at ``[MASK]``
(the BLiMP metric of :func:`cmixlib.training.mlm.load_mlm_model` and the prompt fine-tune).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from cmixlib.forward.batching import length_batches, pad_sequences
from cmixlib.models import arch
from cmixlib.models.devices import model_device
from cmixlib.training.common import pad_id, progress_bar


def mlm_head_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """Vocabulary logits from final hidden states (any leading shape) through the model's MLM head
    (:func:`cmixlib.models.arch.mlm_head`)."""
    transform, decoder = arch.mlm_head(model)
    return decoder(transform(hidden))


def mlm_head_param_names(model) -> list[str]:
    """Names of the MLM head's *own* parameters (everything outside the base encoder).

    The tied decoder matrix is not among them: it is the word-embedding matrix of the encoder.
    """
    prefix = model.base_model_prefix + "."
    return [n for n, _ in model.named_parameters() if not n.startswith(prefix)]


def decoder_is_tied(model) -> bool:
    """True when the output (decoder) matrix is the very same tensor as the input word embeddings."""
    out = model.get_output_embeddings()
    return out is not None and out.weight is model.get_input_embeddings().weight


def logits_at(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              positions: torch.Tensor) -> torch.Tensor:
    """Vocabulary logits at one position per row (``positions``: (batch,)); shape (batch, vocab)."""
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    picked = hidden[torch.arange(hidden.shape[0], device=hidden.device), positions]
    return mlm_head_logits(model, picked)


def mlm_agreement_scores(model, examples: Sequence[dict], *, batch_size: int = 64,
                         pad_token_id: int | None = None, progress: bool = False) -> np.ndarray:
    """``logit(target) - logit(foil)`` at the ``[MASK]`` position for each agreement example."""
    pad = pad_id(model) if pad_token_id is None else pad_token_id
    dev = model_device(model)
    was = model.training
    model.eval()
    out = np.empty(len(examples), dtype=np.float64)
    with torch.no_grad():
        for b in progress_bar(length_batches([len(e["input_ids"]) for e in examples], batch_size),
                              desc="agreement eval", disable=not progress, leave=False):
            ids, att = pad_sequences([examples[i]["input_ids"] for i in b], pad, dev)
            pos = torch.as_tensor([int(examples[i]["target_index"]) for i in b], device=dev)
            lg = logits_at(model, ids, att, pos)
            t = torch.as_tensor([int(examples[i]["target_id"]) for i in b], device=dev)
            f = torch.as_tensor([int(examples[i]["foil_id"]) for i in b], device=dev)
            r = torch.arange(len(b), device=dev)
            out[b] = (lg[r, t] - lg[r, f]).double().cpu().numpy()
    model.train(was)
    return out


def mlm_agreement_accuracy(model, examples: Sequence[dict], **kw) -> float:
    """Share of examples with p(target) > p(foil) at ``[MASK]`` (the VZ paper: 0.96 pre-trained BERT)."""
    return float((mlm_agreement_scores(model, examples, **kw) > 0).mean())
