"""Plausibility metrics (cmixlib.metrics.plausibility): the numpy AUPRC and word pooling against the
obvious reference (sklearn's ``average_precision_score`` and a loop that pools each word's
pieces with numpy), on random posts shaped like HateXplain's test posts with rationales.

Each round times the reference and cmixlib on the same posts, in turn, in CPU time of this
process (``time.process_time``: one thread, so a shared machine's other jobs weigh less than on
the wall clock); the table gives the better of the rounds and the largest absolute difference of
the three metrics and of the pooled word scores. One "post-method" is what the
``hatexplain-plausibility`` run does per post and method: pool the token scores to words, then
AUPRC, token F1 and IOU F1.

Usage:
  python benchmarks/bench_plausibility_metrics.py --posts 300 --rounds 3
Writes benchmarks/out/bench_plausibility_metrics.json and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from cmixlib.metrics import plausibility as pl


def reference_scores(token_scores, word_to_tokens, rationale) -> tuple[np.ndarray, dict]:
    """Word sums by a loop over words, then sklearn's average precision and cmixlib's F1s."""
    from sklearn.metrics import average_precision_score

    a = np.asarray(token_scores, dtype=float)
    words = np.array([a[list(p)].sum() if len(p) else 0.0 for p in word_to_tokens])
    return words, {"auprc": float(average_precision_score(rationale, words)),
                   "token_f1": pl.token_f1(words, rationale), "iou_f1": pl.iou_f1(words, rationale)}


def posts(count: int, seed: int = 0) -> list[tuple[np.ndarray, list[list[int]], np.ndarray]]:
    """Random posts: 5-60 words of 1-3 pieces, [CLS]/[SEP] around them, a rationale of about a
    third of the words, scores with ties in every third post."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        sizes = rng.integers(1, 4, int(rng.integers(5, 61)))
        starts = 1 + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        w2t = [list(range(s, s + z)) for s, z in zip(starts, sizes)]
        tok = rng.random(int(sizes.sum()) + 2)
        if k % 3 == 0:
            tok = np.round(tok * 4) / 4
        rat = (rng.random(len(w2t)) < 0.35).astype(int)
        rat[rng.integers(len(w2t))] = 1
        out.append((tok, w2t, rat))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--posts", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    data = posts(args.posts)
    ref_t, new_t, diff = [], [], 0.0
    for _ in range(args.rounds):
        t = time.process_time()
        ref = [reference_scores(*p) for p in data]
        ref_t.append(time.process_time() - t)
        t = time.process_time()
        new = []
        for tok, w2t, rat in data:
            words = pl.word_scores(tok, w2t)
            new.append((words, pl.plausibility_scores(words, rat)))
        new_t.append(time.process_time() - t)
        diff = max(diff, max(max(float(np.abs(a[0] - b[0]).max()),
                                 max(abs(a[1][m] - b[1][m]) for m in a[1])) for a, b in zip(ref, new)))
    per = 1e3 / args.posts
    row = {"posts": args.posts, "rounds": args.rounds, "reference_ms": min(ref_t) * per,
           "cmixlib_ms": min(new_t) * per, "speedup": min(ref_t) / min(new_t), "max_abs_diff": diff,
           "machine": platform.processor() or platform.machine(), "date": time.strftime("%Y-%m-%d")}
    out = Path(__file__).resolve().parent / "out" / "bench_plausibility_metrics.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(row, indent=2))
    print("| posts | reference (ms per post-method) | cmixlib (ms) | speed-up | max abs diff |")
    print("|---|---|---|---|---|")
    print(f"| {args.posts} | {row['reference_ms']:.3f} | {row['cmixlib_ms']:.3f} | "
          f"{row['speedup']:.1f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()
