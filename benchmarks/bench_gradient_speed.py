"""Speed of the gradient baselines with and without the last block's FFN at the scored row only.

:func:`cmixlib.gradients.batch_attribute` runs the last encoder block's FFN at the scored row
only (the MLM target, a classifier's first token; :func:`cmixlib.gradients.target_rows.target_row_ffn`).
This script takes the first batch that a book run passes to ``batch_attribute`` (the run's own
model, ids, targets, methods and options), then times the call with that shortcut and without it
(``last_ffn_in`` patched to None), interleaved, in process CPU time with one torch thread, and
prints the largest difference between the two results (float round-off only) and the median time
ratio. Usage: ``python benchmarks/bench_gradient_speed.py [RUN [CONDITION]] [--reps N]``, RUN a
book run (``cmix runs``), default ``cue-alignment pretrained``. Results go to
``benchmarks/out/gradient_speed.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import cmixlib.gradients as G  # noqa: E402
from cmixlib.book.runs import run_arguments  # noqa: E402
from cmixlib.experiments import run_experiment  # noqa: E402
from cmixlib.gradients import layers, scores, target_rows  # noqa: E402


class _Captured(Exception):
    pass


def first_batch(run: str, condition: str | None, batch: int) -> dict:
    """The arguments of the first ``batch_attribute`` call of a book run (limit ``batch``)."""
    got: dict = {}

    def grab(model, ids, tgts, methods, level, **kw):
        got.update(model=model, ids=ids, targets=tgts, methods=methods, level=level, kw=kw)
        raise _Captured

    exp, _, settings = run_arguments(run, condition) if condition else run_arguments(run)
    real, G.batch_attribute = G.batch_attribute, grab
    try:
        run_experiment(exp, limit=batch, settings=settings, use_cache=False, progress=False)
    except _Captured:
        pass
    finally:
        G.batch_attribute = real
    if not got:
        raise SystemExit(f"{run}: no batch_attribute call at limit {batch}")
    return got


@contextmanager
def full_ffn():
    """Every row through the last block's FFN (the shortcut off)."""
    saved = {m: m.last_ffn_in for m in (scores, layers, target_rows)}
    for m in saved:
        m.last_ffn_in = lambda model: None
    try:
        yield
    finally:
        for m, f in saved.items():
            m.last_ffn_in = f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", nargs="?", default="cue-alignment")
    ap.add_argument("condition", nargs="?", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    a = ap.parse_args()
    cond = a.condition or ("pretrained" if a.run in ("cue-alignment", "faithfulness") else None)
    torch.set_num_threads(1)
    c = first_batch(a.run, cond, a.batch)
    call = lambda: G.batch_attribute(c["model"], c["ids"], c["targets"], c["methods"],  # noqa: E731
                                     c["level"], **c["kw"])
    times: dict[str, list[float]] = {"fast": [], "full": []}
    out: dict[str, dict] = {}
    for _ in range(a.reps):
        for name in times:
            with full_ffn() if name == "full" else nullcontext():
                t0 = time.process_time()
                out[name] = call()
                times[name].append(time.process_time() - t0)
    diff = {m: float(np.abs(out["fast"][m] - out["full"][m]).max()) for m in out["fast"]}
    ratio = float(np.median(times["fast"]) / np.median(times["full"]))
    row = {"run": a.run, "condition": cond, "batch": list(c["ids"].shape), "methods": c["methods"],
           "level": c["level"], "model": type(c["model"]).__name__, "cpu_s": times,
           "ratio_fast_over_full": ratio, "max_abs_diff": diff, "torch_threads": 1}
    print(json.dumps(row, indent=1))
    path = Path(__file__).parent / "out" / "gradient_speed.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
