"""MDL online-code probing (Voita & Titov, 2020) of a label from fixed features.

The data (N examples, K classes) is shuffled once (seeded) and cut at the cumulative percentages
``blocks`` (default 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50, 100 % of N). The first block
is transmitted with the uniform code, ``N_1 * log2(K)`` bits. Every later block
``(t_{k-1}, t_k]`` is transmitted with a probe trained (from scratch) on all earlier examples
``[0, t_{k-1})``; its cost is the summed cross-entropy of that probe on the block, **in bits**
(natural-log cross-entropy divided by ln 2). Then

* ``codelength`` = uniform first block + sum of block costs (bits);
* ``uniform_codelength`` = ``N * log2(K)``;
* ``compression`` = ``uniform_codelength / codelength`` (1 = no better than guessing).

Differences from the Value Zeroing repository's ``onlinecoding.py`` (see
book/reference_code.md §3.2), on purpose:

* the probe outputs **logits** (no softmax before ``CrossEntropyLoss``), so compression is not
  capped at ~3.2;
* all costs are in bits (the reference adds nats to bits);
* the learning rate is constant (AdamW, lr 1e-3) instead of a linear schedule that reaches 0 after
  one epoch;
* the number of epochs is chosen by **early stopping on a held-out part of the training portion**
  (``val_fraction``, default 10 %; an epoch counts as an improvement when the mean held-out loss
  drops by more than ``min_delta`` = 1e-3 nats; patience 5; at most ``max_epochs`` = 50; the best
  epoch's weights are kept), never on the block being
  transmitted (the reference takes the minimum of the block's loss over epochs, which peeks at
  the data being encoded). Training portions with fewer than ``min_early_stopping`` examples
  (default 20) have no room for a held-out part; they are trained for a fixed ``small_epochs``
  (default 10) epochs.

Features are standardised with mean / std computed on each training portion only (``standardize``).
Everything is seeded (``seed``), runs single-threaded (bitwise reproducible) and takes a few
seconds on CPU for N ~ 2000, d <= 768.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["DEFAULT_BLOCKS", "VZ_BLOCKS", "MDLResult", "block_boundaries", "mdl_probe", "mdl_by_layer"]

#: The block schedule of the issue (percent of N, cumulative), from 0.1 % to 100 %.
DEFAULT_BLOCKS: tuple[float, ...] = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25.0, 50.0, 100.0)
#: The schedule of the Value Zeroing repository (``onlinecoding.py``), 0.8 % to 100 %.
VZ_BLOCKS: tuple[float, ...] = (0.8, 1.6, 3.2, 6.25, 12.5, 25.0, 50.0, 100.0)

LN2 = math.log(2.0)


@dataclass
class MDLResult:
    """Outcome of :func:`mdl_probe`. All lengths are in bits."""

    codelength: float
    uniform_codelength: float
    compression: float
    n: int
    num_classes: int
    blocks: pd.DataFrame
    settings: dict = field(default_factory=dict)

    @property
    def kbits(self) -> float:
        return self.codelength / 1024.0

    def summary(self) -> dict[str, Any]:
        return {"codelength_bits": self.codelength, "uniform_bits": self.uniform_codelength,
                "compression": self.compression, "n": self.n, "num_classes": self.num_classes}


def block_boundaries(n: int, blocks: Sequence[float] = DEFAULT_BLOCKS) -> list[int]:
    """Cumulative end indices of the blocks: ``round(n * p / 100)``, made strictly increasing.

    Percentages that round to an index already used (tiny N) are dropped; the last boundary is N.
    The first block always has at least one example.
    """
    if n < 2:
        raise ValueError("MDL probing needs at least 2 examples")
    ps = sorted(float(p) for p in blocks)
    if not ps or ps[-1] != 100.0:
        ps.append(100.0)
    out: list[int] = []
    for p in ps:
        b = max(1, int(round(n * p / 100.0)))
        b = min(b, n)
        if not out or b > out[-1]:
            out.append(b)
    if out[-1] != n:
        out.append(n)
    if len(out) < 2:
        raise ValueError(f"blocks {blocks} give a single block for n={n}")
    return out


def _on_cpu(values):
    """A torch tensor (any device) as a CPU numpy array; anything else unchanged."""
    return values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else values


def _make_probe(d: int, k: int, hidden: int, dropout: float):
    if hidden <= 0:
        return nn.Linear(d, k)
    return nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.LayerNorm(hidden), nn.Dropout(dropout),
                         nn.Linear(hidden, k))


def _train_probe(X, y, k, *, hidden, dropout, lr, weight_decay, batch_size, max_epochs,
                 patience, val_fraction, min_early_stopping, small_epochs, min_delta, gen):
    """Train a fresh probe on (X, y) (torch tensors); return (model, epochs_trained)."""
    n = X.shape[0]
    model = _make_probe(X.shape[1], k, hidden, dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    if n >= min_early_stopping:
        n_val = max(1, int(round(val_fraction * n)))
        perm = torch.randperm(n, generator=gen)
        val_idx, tr_idx = perm[:n_val], perm[n_val:]
        epochs, use_val = max_epochs, True
    else:
        tr_idx, val_idx = torch.arange(n), None
        epochs, use_val = small_epochs, False
    Xtr, ytr = X[tr_idx], y[tr_idx]
    best, best_state, bad, trained = float("inf"), None, 0, 0
    for _ in range(epochs):
        model.train()
        order = torch.randperm(Xtr.shape[0], generator=gen)
        for s in range(0, Xtr.shape[0], batch_size):
            idx = order[s:s + batch_size]
            loss = F.cross_entropy(model(Xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        trained += 1
        if use_val:
            model.eval()
            with torch.no_grad():
                vl = F.cross_entropy(model(X[val_idx]), y[val_idx]).item()
            if vl < best - min_delta:
                best, best_state, bad = vl, copy.deepcopy(model.state_dict()), 0
            else:
                bad += 1
                if bad >= patience:
                    break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return model, trained


def mdl_probe(features, labels, *, num_classes: int | None = None,
              blocks: Sequence[float] = DEFAULT_BLOCKS, hidden: int = 128, dropout: float = 0.2,
              lr: float = 1e-3, weight_decay: float = 0.0, batch_size: int = 128,
              max_epochs: int = 50, patience: int = 5, val_fraction: float = 0.1, min_delta: float = 1e-3,
              min_early_stopping: int = 20, small_epochs: int = 10, standardize: bool = True,
              shuffle: bool = True, seed: int = 0) -> MDLResult:
    """Online-code MDL of ``labels`` given ``features`` (see the module docstring).

    Parameters
    ----------
    features:
        ``(N, d)`` array of fixed representations (e.g. the ``[MASK]`` hidden state of one layer).
    labels:
        ``N`` integer labels in ``[0, K)``.
    num_classes:
        K; default ``max(labels) + 1``.
    blocks:
        Cumulative block ends in percent of N (:data:`DEFAULT_BLOCKS`; :data:`VZ_BLOCKS` for the
        Value Zeroing schedule).
    hidden:
        Width of the MLP probe's hidden layer; ``0`` gives a linear probe.

    Returns
    -------
    MDLResult
        ``codelength`` and ``uniform_codelength`` in bits, ``compression``, and ``blocks``: one row
        per block with ``start, end, n_train, n_eval, cost_bits, uniform_bits, accuracy, epochs``.
    """
    # probes train on the CPU (small, one thread, reproducible); tensors may come from any device
    X = np.asarray(_on_cpu(features), dtype=np.float32)
    y = np.asarray(_on_cpu(labels)).astype(np.int64).ravel()
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise ValueError(f"features {X.shape} and labels {y.shape} do not match")
    n = X.shape[0]
    k = int(num_classes if num_classes is not None else y.max() + 1)
    if k < 2 or y.min() < 0 or y.max() >= k:
        raise ValueError("labels must be integers in [0, num_classes) with num_classes >= 2")
    if shuffle:
        perm = np.random.default_rng(seed).permutation(n)
        X, y = X[perm], y[perm]
    bounds = block_boundaries(n, blocks)
    log2k = math.log2(k)
    rows = [{"block": 0, "start": 0, "end": bounds[0], "n_train": 0, "n_eval": bounds[0],
             "cost_bits": bounds[0] * log2k, "uniform_bits": bounds[0] * log2k,
             "accuracy": float("nan"), "epochs": 0}]
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng(devices=[]):
            # one thread: tiny matmuls gain nothing from more, and results are then bitwise
            # reproducible whatever the machine's thread count (restored below)
            torch.set_num_threads(1)
            torch.manual_seed(seed)
            gen = torch.Generator().manual_seed(seed)
            for bi in range(1, len(bounds)):
                start, end = bounds[bi - 1], bounds[bi]
                Xtr, ytr = X[:start], y[:start]
                Xev, yev = X[start:end], y[start:end]
                if standardize:
                    mu = Xtr.mean(0, keepdims=True)
                    sd = Xtr.std(0, keepdims=True) + 1e-6
                    Xtr, Xev = (Xtr - mu) / sd, (Xev - mu) / sd
                Xt, yt = torch.from_numpy(np.ascontiguousarray(Xtr)), torch.from_numpy(ytr)
                model, epochs = _train_probe(
                    Xt, yt, k, hidden=hidden, dropout=dropout, lr=lr, weight_decay=weight_decay,
                    batch_size=batch_size, max_epochs=max_epochs, patience=patience,
                    val_fraction=val_fraction, min_early_stopping=min_early_stopping,
                    small_epochs=small_epochs, min_delta=min_delta, gen=gen)
                with torch.no_grad():
                    logits = model(torch.from_numpy(np.ascontiguousarray(Xev)))
                    nats = torch.nn.functional.cross_entropy(logits, torch.from_numpy(yev), reduction="sum").item()
                    acc = float((logits.argmax(-1).numpy() == yev).mean())
                rows.append({"block": bi, "start": start, "end": end, "n_train": start, "n_eval": end - start,
                             "cost_bits": nats / LN2, "uniform_bits": (end - start) * log2k,
                             "accuracy": acc, "epochs": epochs})
    finally:
        torch.set_num_threads(threads)
    table = pd.DataFrame(rows)
    codelength = float(table.cost_bits.sum())
    uniform = n * log2k
    settings = dict(blocks=list(blocks), hidden=hidden, dropout=dropout, lr=lr, weight_decay=weight_decay,
                    batch_size=batch_size, max_epochs=max_epochs, patience=patience,
                    val_fraction=val_fraction, min_delta=min_delta, min_early_stopping=min_early_stopping,
                    small_epochs=small_epochs, standardize=standardize, shuffle=shuffle, seed=seed,
                    optimizer="AdamW, constant lr", units="bits")
    return MDLResult(codelength=codelength, uniform_codelength=uniform, compression=uniform / codelength,
                     n=n, num_classes=k, blocks=table, settings=settings)


def mdl_by_layer(features_by_layer, labels, **kwargs) -> pd.DataFrame:
    """Run :func:`mdl_probe` for each layer of a ``(L+1, N, d)`` array (or list); tidy DataFrame.

    Columns: ``layer, codelength_bits, uniform_bits, compression, n, num_classes``.
    """
    rows = []
    for layer, feats in enumerate(features_by_layer):
        res = mdl_probe(feats, labels, **kwargs)
        rows.append({"layer": layer, **res.summary()})
    return pd.DataFrame(rows)
