"""Batching token-id sequences: length-sorted batches and right padding, used by the trainers,
the experiments and the baselines alike."""
from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["length_batches", "pad_sequences"]


def length_batches(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Indices ``0..len(lengths)-1`` in batches of ``size``, shortest first (a stable sort by
    length, so equal lengths keep their order): padded batches then waste little."""
    if size < 1:
        raise ValueError(f"batch size must be at least 1, got {size}")
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    return [order[k:k + size] for k in range(0, len(order), size)]


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int, device=None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` ``(B, n)`` long tensors of token-id sequences, right-padded
    with ``pad_id`` (n the longest length), on ``device``."""
    if not seqs:
        raise ValueError("pad_sequences needs at least one sequence")
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        att[i, : len(s)] = 1
    return ids.to(device), att.to(device)
