"""Value Zeroing: factored form (first FFN matmul per head) vs today's batched form vs the per-token
loop, on a randomly initialised model of bert-base's shape (d = 768, 12 heads, d_ff = 3072) cut to
``--layers`` layers.

All three start from the same captured forward pass (layer inputs and attention weights), which
is not timed; each timed call builds fresh LayerStates, so per-layer precomputation (value and
head vectors, LN1 inputs, the original outputs) is included.

- factored: ``value_zeroing_layer(..., method="factored")`` (the default for full maps);
- batched:  ``value_zeroing_layer(..., method="batched")`` (n^2 perturbed LN1 inputs through the FFN);
- loop:     for every layer and token t, re-run the layer with a hook zeroing t's value vector.

FLOP floors per layer: batched 4 n^2 d d_ff (both FFN matmuls per pair); factored
2 n^2 d d_ff + 2 n^2 H d_ff (W2 per pair + combining the per-head W1 products). The reference
matmul rate is a (n^2, d_ff) x (d_ff, d) matmul (W2's shape) timed in the same run.

Usage:
  python benchmarks/bench_vz_factored.py --threads 2 --layers 2 --lengths 16 32 64 128 --repeats 3
  python benchmarks/bench_vz_factored.py --device cuda --lengths 16 32 64 128 256 512 --precision fp32 tf32
Writes benchmarks/out/bench_vz_factored[_cuda].json and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch
import transformers as tf

from cmixlib.forward.encoder import encoder_layers, iter_sentences, layer_states, run_and_capture
from cmixlib.methods.value_zeroing import value_zeroing_layer

from bench_methods import vz_loop_layers   # the per-token reference loop (same folder)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def best_time(fn, repeats: int, device: str) -> float:
    fn()  # warm-up
    sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


def interleaved_times(fns: dict, repeats: int, device: str) -> dict[str, list[float]]:
    """Times of each function over ``repeats`` rounds, the functions taking turns within a round
    (the order rotating each round), so that a change of machine load in the middle of a run
    slows all of them alike and the ratios of one round stay comparable."""
    names = list(fns)
    for name in names:      # warm-up
        fns[name]()
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in names}
    for k in range(repeats):
        for name in names[k % len(names):] + names[:k % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return times


def median(xs) -> float:
    xs = sorted(xs)
    return 0.5 * (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2])


def bert_base_random(layers: int, device: str, seed: int = 0):
    torch.manual_seed(seed)
    cfg = tf.BertConfig(num_hidden_layers=layers)  # hidden 768, 12 heads, FFN 3072
    cfg._attn_implementation = "eager"
    return tf.BertModel(cfg, add_pooling_layer=False).eval().to(device), cfg


@torch.no_grad()
def vz(mods, cap, method: str, rows=None, chunk=None) -> torch.Tensor:
    states = layer_states(cap, mods, 0, iter_sentences(cap)[0], rows=rows)
    return torch.stack([value_zeroing_layer(st, method=method, chunk_elements=chunk) for st in states])


def set_precision(device: str, precision: str) -> None:
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--loop-max-n", type=int, default=128, help="time the per-token loop up to this n")
    ap.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "tf32"],
                    help="cuda only: fp32 and/or TF32 matmuls")
    ap.add_argument("--chunk-sweep", type=int, default=0, help="also time the factored form at this n "
                    "for chunk sizes 2^19..2^25 (elements of the (pairs, d_ff) tensor)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = args.device
    model, cfg = bert_base_random(args.layers, dev)
    mods = encoder_layers(model)
    d, dff, H, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_attention_heads, cfg.num_hidden_layers
    results = []
    for prec in args.precision if dev == "cuda" else ["fp32"]:
        set_precision(dev, prec)
        # one untimed pass of each form first: the first timings of a process otherwise carry
        # one-off costs (thread pool, allocator, the cached W1 head maps), which showed as a
        # spurious 0.7x at the first length of one run
        ids = torch.randint(1000, 20000, (1, min(args.lengths)), generator=torch.Generator().manual_seed(0))
        warm = run_and_capture(model, ids.to(dev))
        for _ in range(2):
            vz(mods, warm, "factored"), vz(mods, warm, "batched")
        for n in args.lengths:
            ids = torch.randint(1000, 20000, (1, n), generator=torch.Generator().manual_seed(n))
            ids[0, 0], ids[0, -1] = 101, 102
            cap = run_and_capture(model, ids.to(dev))
            fac, bat = vz(mods, cap, "factored"), vz(mods, cap, "batched")
            diff = (fac - bat).abs().max().item()
            run_loop = n <= args.loop_max_n
            diff_loop = (fac - vz_loop_layers(mods, cap)).abs().max().item() if run_loop else float("nan")
            reps = args.repeats if n <= 64 or dev == "cuda" else max(1, args.repeats - 1)
            a = torch.randn(n * n, dff, device=dev)
            w = torch.randn(dff, d, device=dev)
            load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            tt = interleaved_times({"factored": lambda: vz(mods, cap, "factored"),
                                    "batched": lambda: vz(mods, cap, "batched"),
                                    "matmul": lambda: a @ w}, reps, dev)
            del a, w
            t_fac, t_bat, t_mm = (min(tt[k]) for k in ("factored", "batched", "matmul"))
            paired = median(b / f for b, f in zip(tt["batched"], tt["factored"]))
            t_loop = best_time(lambda: vz_loop_layers(mods, cap), reps, dev) if run_loop else float("nan")
            row = torch.tensor([n // 2], device=dev)
            t_row_auto = best_time(lambda: vz(mods, cap, "auto", rows=row), reps, dev)
            t_row_fac = best_time(lambda: vz(mods, cap, "factored", rows=row), reps, dev)
            load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            mm_rate = 2 * n * n * d * dff / t_mm
            floor_new = L * (2 * n * n * d * dff + 2 * n * n * H * dff)
            floor_old = L * 4 * n * n * d * dff
            r = dict(precision=prec, n=n, factored_s=t_fac, batched_s=t_bat, loop_s=t_loop,
                     speedup_vs_batched=t_bat / t_fac, speedup_vs_loop=t_loop / t_fac,
                     factored_gflops=floor_new / t_fac / 1e9, batched_gflops=floor_old / t_bat / 1e9,
                     matmul_gflops=mm_rate / 1e9, rows_only_auto_s=t_row_auto, rows_only_factored_s=t_row_fac,
                     max_abs_diff_vs_batched=diff, max_abs_diff_vs_loop=diff_loop, repeats=reps,
                     speedup_vs_batched_median_paired=paired, load_average=[load0, load1])
            results.append(r)
            print(f"[{prec}] n={n}: factored {t_fac:.4f}s, batched {t_bat:.4f}s ({t_bat / t_fac:.2f}x), "
                  f"loop {t_loop:.4f}s ({t_loop / t_fac:.2f}x), {r['factored_gflops']:.1f} GFLOP/s vs matmul "
                  f"{r['matmul_gflops']:.1f}, paired median {paired:.2f}x, load {load0:.1f}-{load1:.1f}, one row: auto {t_row_auto:.4f}s factored {t_row_fac:.4f}s, "
                  f"max|diff| batched {diff:.1e} loop {diff_loop:.1e}", flush=True)
    sweep = {}
    if args.chunk_sweep:
        n = args.chunk_sweep
        cap = run_and_capture(model, torch.randint(1000, 20000, (1, n), generator=torch.Generator().manual_seed(n)).to(dev))
        for e in (19, 21, 23, 25):
            sweep[f"2^{e}"] = best_time(lambda: vz(mods, cap, "factored", chunk=2 ** e), args.repeats, dev)
        print(f"factored form at n={n}, time (s) by chunk size:", {k: round(v, 4) for k, v in sweep.items()})
    gpu = torch.cuda.get_device_name() if dev == "cuda" else None
    meta = dict(device=dev, gpu=gpu, machine=platform.processor() or platform.machine(), threads=args.threads,
                torch=torch.__version__, transformers=tf.__version__, layers=L,
                model=f"random BertConfig(num_hidden_layers={L}) (bert-base shape)", repeats=args.repeats)
    out = Path(args.out or Path(__file__).parent / "out" / f"bench_vz_factored{'_cuda' if dev == 'cuda' else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(meta=meta, results=results, chunk_sweep=sweep), indent=1))
    print(f"\n{meta['model']}, {dev}{' ' + gpu if gpu else ''}, {args.threads} threads, best of {args.repeats}")
    print("| prec | n | factored (s) | batched (s) | loop (s) | vs batched | vs loop | factored GFLOP/s "
          "(new floor) | batched GFLOP/s (old floor) | matmul GFLOP/s | factored % of matmul | "
          "vs batched, median of rounds | load avg | "
          "1 row, auto (s) | 1 row, factored (s) | max|fac-bat| | max|fac-loop| |")
    print("|---" * 17 + "|")
    for r in results:
        print(f"| {r['precision']} | {r['n']} | {r['factored_s']:.4f} | {r['batched_s']:.4f} | {r['loop_s']:.4f} | "
              f"{r['speedup_vs_batched']:.2f}x | {r['speedup_vs_loop']:.2f}x | {r['factored_gflops']:.1f} | "
              f"{r['batched_gflops']:.1f} | {r['matmul_gflops']:.1f} | "
              f"{100 * r['factored_gflops'] / r['matmul_gflops']:.0f}% | "
              f"{r['speedup_vs_batched_median_paired']:.2f}x | "
              f"{r['load_average'][0]:.1f}-{r['load_average'][1]:.1f} | {r['rows_only_auto_s']:.4f} | "
              f"{r['rows_only_factored_s']:.4f} | {r['max_abs_diff_vs_batched']:.1e} | {r['max_abs_diff_vs_loop']:.1e} |")


if __name__ == "__main__":
    main()
