"""HTA × input (cmixlib.methods.hta): the closed form (``method="closed"``, the default) against the vmapped
vector-Jacobian products through the Hugging Face layer (``method="autograd"``, the former
implementation), on the packaged MiniLM (``cmixlib.load_model()``: all-MiniLM-L6-v2, d = 384,
6 layers, 12 heads, d_ff = 1536), all layers of sentences of exactly ``--tokens`` tokens.

Each sentence is timed in one round: closed, [before], [autograd], closed again (the closed form's
time is the better of its runs, after one untimed warm-up), so that a change of the machine's load
during the round affects all. ``--before FILE``: a copy of an earlier ``cmixlib/methods/hta.py``, imported
as a module of the package and timed with its own closed form (the speed-up of a change, measured
in the same rounds); ``--no-autograd`` skips the slow ``method="autograd"``. Every method starts
from the same text and includes its forward pass. Times are CPU seconds of this process
(``time.process_time``; one thread, so it is the time the work had on a core; on a shared machine
wall-clock times vary with the other jobs far more). Also printed: the largest absolute difference
of the raw (un-normalised) maps from the closed form's, and the closed form's rate of counted
matmul FLOPs (:func:`counted_flops`).

Usage:
  python benchmarks/bench_hta.py --threads 1 --tokens 25 --sentences 2 [--before /tmp/hta_old.py] [--no-autograd]
Writes benchmarks/out/bench_hta.json and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import importlib.util
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
from cmixlib.methods.hta import hta

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
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def load_before(path: str):
    """An earlier ``cmixlib/methods/hta.py`` (a copy of the file) as a module of the installed package, so
    that its relative imports resolve; its ``hta`` is timed as the "before"."""
    spec = importlib.util.spec_from_file_location("cmixlib._hta_before", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def counted_flops(n: int, d: int, d_ff: int, H: int, L: int, block: int = 64) -> float:
    """Matmul FLOPs of the closed form per sentence (cmixlib.methods.hta's docstring): per token and layer
    the FFN Jacobian 2 d d_ff d, G = P W_O and the diagonal block 2 d^3 each, S_i and Gamma_j by
    blocks of ``block`` rows ((K+1)/2K of 2 d^3 each, K = d/block blocks), beta 2 d^2 H n."""
    K = max(1, d // block)
    return L * n * (2 * d * d_ff * d + 2 * 2 * d ** 3 + 2 * (K + 1) / (2 * K) * 2 * d ** 3
                    + 2 * d * d * H * n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=25)
    ap.add_argument("--sentences", type=int, default=1, help=f"how many of the {len(TEXTS)} texts")
    ap.add_argument("--out", default=None)
    ap.add_argument("--before", default=None, help="a copy of an earlier cmixlib/methods/hta.py to time against")
    ap.add_argument("--no-autograd", action="store_true", help='skip method="autograd" (slow)')
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
    before = load_before(args.before) if args.before else None
    if before is not None:
        before.hta(bundle, None, {"input_ids": sentence_ids(tok, TEXTS[0], n)}, layers=[0])
    results = []
    for k, text in enumerate(TEXTS[:args.sentences]):
        ids = {"input_ids": sentence_ids(tok, text, n)}
        l0 = load()
        closed, t_c1 = timed(lambda: hta(bundle, None, ids, normalize=False))
        r = dict(sentence=k, n=n, max_abs_raw=float(np.abs(closed).max()))
        if before is not None:
            old, r["before_s"] = timed(lambda: before.hta(bundle, None, ids, normalize=False))
            r["max_abs_diff_before"] = float(np.abs(closed - old).max())
        if not args.no_autograd:
            auto, r["autograd_s"] = timed(lambda: hta(bundle, None, ids, normalize=False, method="autograd"))
            r["max_abs_diff_autograd"] = float(np.abs(closed - auto).max())
        _, t_c2 = timed(lambda: hta(bundle, None, ids, normalize=False))
        t_c = min(t_c1, t_c2)
        r.update(closed_s=t_c, closed_runs_s=[t_c1, t_c2], load_average=[l0, load()],
                 closed_gflops=counted_flops(n, d, d_ff, H, L) / t_c / 1e9)
        for key in ("before", "autograd"):
            if f"{key}_s" in r:
                r[f"speedup_vs_{key}"] = r[f"{key}_s"] / t_c
        results.append(r)
        print(f"sentence {k} (n={n}): closed {t_c:.2f}s (runs {t_c1:.2f}, {t_c2:.2f})"
              + "".join(f", {key} {r[key + '_s']:.2f}s ({r['speedup_vs_' + key]:.2f}x, max|diff| "
                        f"{r['max_abs_diff_' + key]:.1e})" for key in ("before", "autograd") if key + "_s" in r)
              + f", max {r['max_abs_raw']:.1f}, load {l0:.1f}-{r['load_average'][1]:.1f}", flush=True)
    meta = dict(machine=platform.processor() or platform.machine(), cpus=os.cpu_count(), threads=args.threads,
                torch=torch.__version__, transformers=tf.__version__, model=getattr(cfg, "_name_or_path", "?"),
                d=d, d_ff=d_ff, heads=H, layers=L, tokens=n, dtype="float32", clock="process_time",
                before=args.before)
    out = Path(args.out or Path(__file__).parent / "out" / "bench_hta.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(meta=meta, results=results), indent=1))
    print(f"\nMiniLM ({d}, {L} layers, {H} heads, d_ff {d_ff}), {args.threads} thread(s), float32, all layers, CPU s")
    cols = [c for c in ("before", "autograd") if any(c + "_s" in r for r in results)]
    print("| sentence | n | closed (s) | " + "".join(f"{c} (s) | speed-up vs {c} | max abs diff {c} | " for c in cols)
          + "closed GFLOP/s (counted) | load avg |")
    print("|---" * (5 + 3 * len(cols)) + "|")
    for r in results:
        print(f"| {r['sentence']} | {r['n']} | {r['closed_s']:.2f} | "
              + "".join(f"{r[c + '_s']:.2f} | {r['speedup_vs_' + c]:.2f}x | {r['max_abs_diff_' + c]:.1e} | " for c in cols)
              + f"{r['closed_gflops']:.1f} | {r['load_average'][0]:.1f}-{r['load_average'][1]:.1f} |")


if __name__ == "__main__":
    main()
