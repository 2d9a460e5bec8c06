"""The one training loop, :func:`fit`, that every trainer of :mod:`cmixlib.training` runs, with
its linear learning-rate schedule and its two batch orders.

``fit`` owns the optimizer (AdamW), the linear schedule with warm-up, the steps over a batch
order, the progress bar and the per-step record; a trainer only says which parameters, which
batches (:func:`epoch_batches`: a fresh seeded permutation each epoch; :func:`stream_batches`:
a fixed number of steps through seeded permutations) and what the loss of a batch is.
:func:`watch_steps` lets a caller (a test, a notebook) see every step any trainer takes.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from cmixlib.training.common import progress_bar


def linear_schedule_factor(step: int, total_steps: int, warmup_steps: int) -> float:
    """LR multiplier of the linear schedule with warm-up (as HF ``get_linear_schedule_with_warmup``).

    Rises linearly from 0 to 1 over ``warmup_steps``, then decays linearly to 0 at ``total_steps``.
    """
    if step < warmup_steps:
        return step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def warmup_steps_for(total_steps: int, warmup: float) -> int:
    """Number of warm-up steps for a warm-up *ratio* (rounded up, as HF ``TrainingArguments``)."""
    return int(math.ceil(total_steps * warmup))


def make_linear_scheduler(optimizer, total_steps: int, warmup: float):
    """``LambdaLR`` implementing :func:`linear_schedule_factor` with ``warmup`` as a ratio."""
    w = warmup_steps_for(total_steps, warmup)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: linear_schedule_factor(s, total_steps, w))


def epoch_batches(n: int, batch_size: int, epochs: int, seed: int) -> Iterator[tuple[int, list[int]]]:
    """``(epoch, indices)`` for ``epochs`` passes over ``range(n)``, each in a fresh permutation
    drawn from a generator seeded with ``seed``, cut into ``ceil(n / batch_size)`` batches."""
    g = torch.Generator().manual_seed(seed)
    for ep in range(epochs):
        perm = torch.randperm(n, generator=g).tolist()
        for s in range(math.ceil(n / batch_size)):
            yield ep, perm[s * batch_size:(s + 1) * batch_size]


def stream_batches(n: int, batch_size: int, steps: int,
                   seed: int) -> Iterator[tuple[int, torch.Tensor]]:
    """``(pass, indices)`` for ``steps`` full batches of ``range(n)``: consecutive slices of a
    seeded permutation, a new permutation (next pass) when the next slice would not fit."""
    g = torch.Generator().manual_seed(seed)
    perm, ptr, ep = torch.randperm(n, generator=g), 0, 0
    for _ in range(steps):
        if ptr + batch_size > len(perm):
            perm, ptr, ep = torch.randperm(n, generator=g), 0, ep + 1
        yield ep, perm[ptr:ptr + batch_size]
        ptr += batch_size


@dataclass(frozen=True)
class Step:
    """One optimizer step of :func:`fit`: which run (its ``name``), epoch, step, loss, and the
    learning rate the step used."""

    name: str
    epoch: int
    step: int
    loss: float
    lr: float


@dataclass
class FitResult:
    """What :func:`fit` returns: the loss of every step and the mean loss of every epoch."""

    losses: list[float] = field(default_factory=list)
    epoch_losses: list[float] = field(default_factory=list)

    def recent_loss(self, window: int) -> float | None:
        """Mean loss of the last ``window`` steps (None without steps)."""
        return float(np.mean(self.losses[-window:])) if self.losses else None


_WATCHERS: list[Callable[[Step], None]] = []


@contextmanager
def watch_steps() -> Iterator[list[Step]]:
    """Within the block, every :class:`Step` that :func:`fit` takes (in any trainer) is appended
    to the yielded list: e.g. an empty list after a call means it trained nothing (cache hit)."""
    seen: list[Step] = []
    _WATCHERS.append(seen.append)
    try:
        yield seen
    finally:
        _WATCHERS.remove(seen.append)


def fit(params: Iterable[torch.nn.Parameter], loss_fn: Callable[[Any], torch.Tensor],
        batches: Iterable[tuple[int, Any]], *, total_steps: int, lr: float,
        weight_decay: float = 0.0, warmup: float = 0.0, name: str = "training",
        progress: bool = True, log_every: int = 1, log_window: int = 20,
        start_step: int = 0, resume: dict | None = None,
        after_step: Callable[[int, float, Any, Any], None] | None = None) -> FitResult:
    """Train ``params`` with AdamW (``lr``, ``weight_decay``) and the linear schedule over
    ``total_steps`` with a ``warmup`` ratio, one step per ``(epoch, batch)`` of ``batches``
    minimising ``loss_fn(batch)``.

    The caller seeds and sets the model's mode (train: dropout on) before; nothing here draws from
    a global generator, so the steps are exactly those of the batches given. The progress bar
    (``name``) shows the mean loss of the last ``log_window`` steps every ``log_every`` steps;
    :func:`watch_steps` sees each step.

    A run stopped at step ``start_step`` continues with ``batches`` from that step on and
    ``resume`` = ``{"opt": ..., "sched": ...}``, the ``state_dict()`` of the optimizer and of the
    schedule when it stopped (the caller restores the parameters and the random state):
    the steps are then those of the uninterrupted run. ``after_step(done, loss, optimizer,
    schedule)`` is called after each step (``done``: steps taken, counting from the first run),
    e.g. to validate or to write such a checkpoint.
    """
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = make_linear_scheduler(opt, total_steps, warmup)
    if resume is not None:
        opt.load_state_dict(resume["opt"])
        sched.load_state_dict(resume["sched"])
    result, current, last_epoch = FitResult(), [], None
    bar = progress_bar(total=total_steps, initial=start_step, desc=name, disable=not progress)
    for step, (epoch, batch) in enumerate(batches, start=start_step):
        if epoch != last_epoch and current:
            result.epoch_losses.append(float(np.mean(current)))
            current = []
        last_epoch = epoch
        step_lr = opt.param_groups[0]["lr"]
        loss = loss_fn(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        value = loss.item()
        result.losses.append(value)
        current.append(value)
        bar.update(1)
        if step % log_every == 0:
            bar.set_postfix(epoch=epoch + 1, loss=f"{np.mean(result.losses[-log_window:]):.3f}")
        for watch in list(_WATCHERS):
            watch(Step(name, epoch, step, value, step_lr))
        if after_step is not None:
            after_step(step + 1, value, opt, sched)
    if current:
        result.epoch_losses.append(float(np.mean(current)))
    bar.close()
    return result
