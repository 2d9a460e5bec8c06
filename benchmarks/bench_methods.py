"""Benchmarks for cmixlib's context-mixing methods on a bert-base-sized random model.

(a) exact batched Value Zeroing vs the obvious per-token loop (re-run the layer with token t's
    value zeroed by a hook), same run, same threads;
(b) achieved FLOP rate of full Value Zeroing (counting only the n^2 FFN evaluations per layer it
    cannot avoid) against a plain matmul of the same shape on the same machine;
(c) all methods together for one sentence, with a per-method breakdown;
(d) Value Zeroing for one query row only.

Usage:  python benchmarks/bench_methods.py [--threads 2] [--lengths 16 32 64] [--repeats 3] [--flow-max-n 32]
Writes a JSON file next to this script (benchmarks/out/) and prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
import transformers as tf

import cmixlib
from cmixlib.forward.encoder import encoder_layers, iter_sentences, layer_states, run_and_capture
from cmixlib.methods.value_zeroing import value_zeroing_layer


def best_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bert_base_random(seed: int = 0):
    torch.manual_seed(seed)
    cfg = tf.BertConfig()  # 12 layers, hidden 768, 12 heads, FFN 3072: bert-base-uncased's shape
    return tf.BertModel(cfg, add_pooling_layer=False).eval(), cfg


@torch.no_grad()
def vz_loop_layers(mods, cap) -> torch.Tensor:
    """The obvious implementation: for every layer and token, re-run that layer on its original
    input with a hook that zeroes the token's value vector (all heads, bias included)."""
    n = cap.inputs[0].shape[1]
    out = torch.empty(len(mods), n, n, device=cap.inputs[0].device)
    for k, m in enumerate(mods):
        x, orig = cap.inputs[k], cap.outputs[k][0]
        for t in range(n):
            def zero(mod, inp, o, t=t):
                o = o.clone()
                o[:, t] = 0
                return o
            h = m.value.register_forward_hook(zero)
            try:
                pert = m.layer(x)
                pert = pert[0] if isinstance(pert, tuple) else pert
            finally:
                h.remove()
            out[k, :, t] = 1 - torch.nn.functional.cosine_similarity(pert[0], orig, dim=-1)
    return out


@torch.no_grad()
def vz_loop(model, ids):
    """:func:`vz_loop_layers` including the capture pass (what the batched timing includes)."""
    return vz_loop_layers(encoder_layers(model), run_and_capture(model, ids))


@torch.no_grad()
def vz_batched(model, ids, rows=None):
    mods = encoder_layers(model)
    cap = run_and_capture(model, ids)
    keep = iter_sentences(cap)[0]
    states = layer_states(cap, mods, 0, keep, rows=rows)
    return torch.stack([value_zeroing_layer(st) for st in states])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flow-max-n", type=int, default=32, help="full attention flow up to this length")
    ap.add_argument("--breakdown-max-n", type=int, default=16, help="per-method times up to this length")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "bench_methods.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, cfg = bert_base_random()
    d, dff, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    rows = []
    for n in args.lengths:
        ids = torch.randint(1000, 20000, (1, n), generator=torch.Generator().manual_seed(n))
        ids[0, 0], ids[0, -1] = 101, 102
        # exactness in this very run
        diff = (vz_batched(model, ids) - vz_loop(model, ids)).abs().max().item()
        t_loop = best_time(lambda: vz_loop(model, ids), args.repeats)
        t_vz = best_time(lambda: vz_batched(model, ids), args.repeats)
        t_row = best_time(lambda: vz_batched(model, ids, rows=torch.tensor([n // 2])), args.repeats)
        # (b) FLOP rate: the n^2 FFN evaluations per layer (two matmuls of 2*d*dff flops each)
        ffn_flops = L * n * n * 4 * d * dff
        a = torch.randn(n * n, d)
        w = torch.randn(d, dff)
        t_mm = best_time(lambda: a @ w, args.repeats)
        mm_rate = 2 * n * n * d * dff / t_mm
        vz_rate = ffn_flops / t_vz
        # (c) all methods together for one sentence; attention flow (L * n^2 max-flow problems)
        #     is timed on its own, for every row up to --flow-max-n tokens and for one row beyond
        others = [m for m in cmixlib.METHODS if m != "attention_flow"]
        t_others = best_time(lambda: cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=others), 1)
        flow_rows = None if n <= args.flow_max_n else [0]
        t_flow = best_time(lambda: cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=["attention_flow"],
                                                          rows=flow_rows), 1)
        t_all = t_others + t_flow if flow_rows is None else float("nan")
        per_method = {m: best_time(lambda m=m: cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=[m]), 1)
                      for m in others} if n <= args.breakdown_max_n else {}
        per_method["attention_flow" if flow_rows is None else "attention_flow (row 0 only)"] = t_flow
        rows.append(dict(n=n, max_abs_diff_vs_loop=diff, loop_s=t_loop, batched_s=t_vz, speedup=t_loop / t_vz,
                         matmul_gflops=mm_rate / 1e9, vz_gflops=vz_rate / 1e9, flop_efficiency=vz_rate / mm_rate,
                         rows_only_s=t_row, all_methods_s=t_all, all_but_flow_s=t_others, per_method_s=per_method))
        print(f"n={n}: loop {t_loop:.3f}s, batched {t_vz:.3f}s ({t_loop / t_vz:.2f}x), "
              f"{vz_rate / 1e9:.1f} vs matmul {mm_rate / 1e9:.1f} GFLOP/s ({100 * vz_rate / mm_rate:.0f}%), "
              f"rows-only {t_row:.3f}s, all but flow {t_others:.2f}s, flow {t_flow:.2f}s, max|diff| {diff:.1e}", flush=True)
    meta = dict(machine=platform.processor() or platform.machine(), threads=args.threads,
                torch=torch.__version__, transformers=tf.__version__, model="random BertConfig() (bert-base shape)",
                repeats=args.repeats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(dict(meta=meta, results=rows), indent=1))
    print("\n| n | VZ loop (s) | VZ batched (s) | speed-up | VZ GFLOP/s | matmul GFLOP/s | % of matmul | rows-only VZ (s) | all but flow (s) | all methods (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {r['loop_s']:.3f} | {r['batched_s']:.3f} | {r['speedup']:.2f}x | {r['vz_gflops']:.1f} | "
              f"{r['matmul_gflops']:.1f} | {100 * r['flop_efficiency']:.0f}% | {r['rows_only_s']:.3f} | "
              f"{r['all_but_flow_s']:.2f} | {r['all_methods_s']:.2f} |")
    print("\nPer-method time (s), one sentence:")
    names = sorted({m for r in rows for m in r["per_method_s"]}, key=lambda m: (m.startswith("attention_flow"), m))
    print("| method | " + " | ".join(f"n={r['n']}" for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for m in names:
        cells = [f"{r['per_method_s'][m]:.3f}" if m in r["per_method_s"] else "-" for r in rows]
        print(f"| {m} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
