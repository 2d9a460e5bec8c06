"""HTA × input (cmixlib.hta): the closed form (``method="closed"``, the default) against the vmapped
vector-Jacobian products through the Hugging Face layer (``method="autograd"``, the former
implementation), on the packaged MiniLM (``cmixlib.load_model()``: all-MiniLM-L6-v2, d = 384,
6 layers, 12 heads, d_ff = 1536), all layers of sentences of exactly ``--tokens`` tokens.

Each sentence is timed in one round: closed, autograd, closed again (the closed form's time is
the better of its runs, after one untimed warm-up), so that a change of the machine's load during
the round affects both. Both start from the same text and include their forward passes. Also
printed: the largest absolute difference of the raw (un-normalised) maps and of the row-normalised
maps, and the closed form's rate of counted matmul FLOPs (per token and layer: the FFN Jacobian
2 d d_ff d, G = P W_O, S = G^T G and the diagonal block 2 d^3 each, Gamma_j 2 d^3, beta 2 d^2 H n).

Usage:
  python benchmarks/bench_hta.py --threads 1 --tokens 25 --sentences 2
Writes benchmarks/out/bench_hta.json and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import transformers as tf

import cmixlib
from cmixlib.hta import hta

#: SST-2-like sentences, cut or padded (by repetition) to the requested length in tokens.
TEXTS = [
    "the film is a charming and often affecting journey , though its pacing drags in the middle and the ending feels rushed .",
    "an utterly forgettable comedy whose jokes land with a thud and whose cast seems to have wandered in from a better movie .",
    "it 's a smart , funny and surprisingly moving look at friendship that never once condescends to its young audience .",
    "a muddled , overlong thriller that mistakes noise for tension and cruelty for depth , leaving nothing behind but fatigue .",
]


def sentence_ids(tokenizer, text: str, n: int) -> torch.Tensor:
    """``[CLS] w_1 .. w_{n-2} [SEP]``: the text's word pieces, repeated if too short, cut to n - 2."""
    pieces = tokenizer(text, add_special_tokens=False)["input_ids"]
    while len(pieces) < n - 2:
        pieces = pieces + pieces
    return torch.tensor([[tokenizer.cls_token_id] + pieces[:n - 2] + [tokenizer.sep_token_id]])


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def counted_flops(n: int, d: int, d_ff: int, H: int, L: int) -> float:
    """Matmul FLOPs of the closed form per sentence (module docstring)."""
    return L * n * (2 * d * d_ff * d + 4 * 2 * d ** 3 + 2 * d * d * H * n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=25)
    ap.add_argument("--sentences", type=int, default=1, help=f"how many of the {len(TEXTS)} texts")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bundle = cmixlib.load_model()
    model, tok = bundle.model, bundle.tokenizer
    cfg = model.config
    d, d_ff, H, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_hidden_layers
    n = args.tokens
    hta(bundle, None, {"input_ids": sentence_ids(tok, TEXTS[0], n)}, layers=[0])    # warm-up (untimed)
    results = []
    for k, text in enumerate(TEXTS[:args.sentences]):
        ids = {"input_ids": sentence_ids(tok, text, n)}
        l0 = load()
        closed, t_c1 = timed(lambda: hta(bundle, None, ids, normalize=False))
        auto, t_a = timed(lambda: hta(bundle, None, ids, normalize=False, method="autograd"))
        _, t_c2 = timed(lambda: hta(bundle, None, ids, normalize=False))
        l1 = load()
        t_c = min(t_c1, t_c2)
        norm = lambda c: c / c.sum(-1, keepdims=True)
        r = dict(sentence=k, n=n, closed_s=t_c, closed_runs_s=[t_c1, t_c2], autograd_s=t_a,
                 speedup=t_a / t_c, max_abs_diff_raw=float(np.abs(closed - auto).max()),
                 max_abs_raw=float(np.abs(auto).max()),
                 max_abs_diff_normalised=float(np.abs(norm(closed) - norm(auto)).max()),
                 closed_gflops=counted_flops(n, d, d_ff, H, L) / t_c / 1e9, load_average=[l0, l1])
        results.append(r)
        print(f"sentence {k} (n={n}): closed {t_c:.2f}s (runs {t_c1:.2f}, {t_c2:.2f}), autograd {t_a:.1f}s, "
              f"{r['speedup']:.1f}x, max|diff| raw {r['max_abs_diff_raw']:.1e} (max {r['max_abs_raw']:.1f}), "
              f"normalised {r['max_abs_diff_normalised']:.1e}, load {l0:.1f}-{l1:.1f}", flush=True)
    meta = dict(machine=platform.processor() or platform.machine(), cpus=os.cpu_count(), threads=args.threads,
                torch=torch.__version__, transformers=tf.__version__, model=getattr(cfg, "_name_or_path", "?"),
                d=d, d_ff=d_ff, heads=H, layers=L, tokens=n, dtype="float32")
    out = Path(args.out or Path(__file__).parent / "out" / "bench_hta.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(meta=meta, results=results), indent=1))
    print(f"\nMiniLM ({d}, {L} layers, {H} heads, d_ff {d_ff}), {args.threads} thread(s), float32, all layers")
    print("| sentence | n | closed (s) | autograd (s) | speed-up | closed GFLOP/s (counted) | max abs diff raw "
          "| max abs diff normalised | load avg |")
    print("|---" * 9 + "|")
    for r in results:
        print(f"| {r['sentence']} | {r['n']} | {r['closed_s']:.2f} | {r['autograd_s']:.1f} | {r['speedup']:.1f}x | "
              f"{r['closed_gflops']:.1f} | {r['max_abs_diff_raw']:.1e} | {r['max_abs_diff_normalised']:.1e} | "
              f"{r['load_average'][0]:.1f}-{r['load_average'][1]:.1f} |")


if __name__ == "__main__":
    main()
