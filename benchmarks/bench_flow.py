"""Attention flow: the joint solve of cmixlib (all max-flow problems of a layer in one scipy call)
against one scipy call per problem (the previous implementation), interleaved in one process.

Inputs: the attention maps of the default encoder on HateXplain test posts (the plausibility
run's data), a sample spread evenly over the posts sorted by length; ``rows=[0]`` (the [CLS] row,
as the plausibility run), also with ``layers=[-1]`` (the only layer the plausibility run reads)
and, for the shortest sampled posts, every row (as chapter 3 and ``context_mixing``). Both sides
must return identical arrays (checked).

Usage:  python benchmarks/bench_flow.py [--sample 40] [--repeats 3] [--full-rows-max-n 24]
Prints per-post times and the estimate for all posts (the sum over the sample times posts /
sample); writes benchmarks/out/bench_flow.json.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

import cmixlib
from cmixlib.methods.aggregation import FLOW_SCALE
from cmixlib.data.hatexplain import load_hatexplain_rationale_inputs


def per_problem_flow(maps: np.ndarray, rows=None) -> np.ndarray:
    """The previous implementation: one scipy max-flow call per layer, sink and source."""
    arr = cmixlib.normalize_rows(maps.astype(np.float64) + np.eye(maps.shape[-1]))
    L, n, _ = arr.shape
    out = np.full((L, n, n), np.nan)
    jj, ii = np.meshgrid(np.arange(n), np.arange(n))
    for top in range(L):
        src = np.concatenate([k * n + jj.ravel() for k in range(top + 1)])
        dst = np.concatenate([(k + 1) * n + ii.ravel() for k in range(top + 1)])
        icap = np.round(arr[:top + 1].reshape(-1) * FLOW_SCALE).astype(np.int64)
        keep = icap > 0
        size = (top + 2) * n
        graph = csr_matrix((icap[keep].astype(np.int32), (src[keep], dst[keep])),
                           shape=(size, size))
        for i in (range(n) if rows is None else rows):
            for j in range(n):
                out[top, i, j] = maximum_flow(graph, j, (top + 1) * n + i).flow_value / FLOW_SCALE
    return out


def best(fn, repeats: int) -> tuple[float, np.ndarray]:
    times, res = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = fn()
        times.append(time.perf_counter() - t0)
    return min(times), res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--full-rows-max-n", type=int, default=24)
    args = ap.parse_args()
    torch.set_num_threads(1)
    bundle = cmixlib.load_model()
    posts = load_hatexplain_rationale_inputs(bundle.tokenizer, "test", None)
    order = sorted(range(len(posts)), key=lambda k: len(posts[k]["input_ids"]))
    pick = [order[k] for k in np.linspace(0, len(order) - 1, args.sample).round().astype(int)]
    rows_out, totals = [], {"cls_old": 0.0, "cls_new": 0.0, "cls_last": 0.0}
    for k in pick:
        ids = {"input_ids": torch.tensor([posts[k]["input_ids"]])}
        att = cmixlib.context_mixing(bundle, None, ids, methods=["attention"], normalize=False)
        maps = att["attention"]
        n = maps.shape[-1]
        # interleaved: old, new for the same post, best of `repeats`
        t_old, ref = best(lambda: per_problem_flow(maps, rows=[0]), args.repeats)
        t_new, got = best(lambda: cmixlib.attention_flow(maps, rows=[0]), args.repeats)
        assert np.array_equal(ref, got, equal_nan=True), "joint solve differs from per-problem"
        t_last, last = best(lambda: cmixlib.attention_flow(maps, rows=[0], layers=[-1]),
                            args.repeats)
        assert np.array_equal(last[-1], ref[-1], equal_nan=True)
        rec = {"n": n, "cls_old_s": t_old, "cls_new_s": t_new, "cls_last_layer_s": t_last}
        if n <= args.full_rows_max_n:
            t_old_f, ref = best(lambda: per_problem_flow(maps), 1)
            t_new_f, got = best(lambda: cmixlib.attention_flow(maps), 1)
            assert np.array_equal(ref, got, equal_nan=True)
            rec.update(all_old_s=t_old_f, all_new_s=t_new_f)
        totals["cls_old"] += t_old
        totals["cls_new"] += t_new
        totals["cls_last"] += t_last
        rows_out.append(rec)
        print(rec, flush=True)
    scale = len(posts) / len(pick)
    summary = {"model": bundle.name if hasattr(bundle, "name") else str(bundle),
               "posts": len(posts), "sample": len(pick), "threads": torch.get_num_threads(),
               "omp": os.environ.get("OMP_NUM_THREADS"),
               "estimated_all_posts_old_s": totals["cls_old"] * scale,
               "estimated_all_posts_new_s": totals["cls_new"] * scale,
               "estimated_all_posts_last_layer_s": totals["cls_last"] * scale,
               "ratio": totals["cls_old"] / totals["cls_new"]}
    print(json.dumps(summary, indent=1))
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "bench_flow.json").write_text(
        json.dumps({"summary": summary, "posts": rows_out}, indent=1))


if __name__ == "__main__":
    main()
