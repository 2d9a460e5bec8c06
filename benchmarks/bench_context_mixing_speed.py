"""context_mixing with GlobEnc's eight methods (Table 1: W, W-FixedRes, W-Res, N, N-FixedRes,
N-Res, N-ResLN, N-Enc) on real MNLI pairs, the committed MNLI classifier
(``cmixlib.load_classifier("mnli")``), in the length batches of the GlobEnc experiment.

Three implementations, timed in turns in the same run (so that a change of machine load slows
all of them alike), each from the same padded batches:

- ``new``: ``cmixlib.context_mixing`` as it is: the LayerNorm inputs p and u and the value
  projections come from the model's forward pass (hooks in ``run_and_capture``), T is built
  from F without materialising z, N and W are computed once per layer for the methods that
  share them, cropping is a block copy;
- ``no-capture``: the same code with the captured tensors dropped, so every layer state
  recomputes p (einsum), u = y + FFN(y) (two linears) and x W_V + b_V: the fallback path, and the
  old cost of the LN2 input;
- ``old``: the code before this change, reproduced here (``OldLayerState``, ``_old_maps``):
  recomputed p and u, z cloned from F, T and T' by ``layer_norm_linear``, every method computing
  its base maps again, cropping by index tensors.

The maps of the three agree to float32 rounding (the script prints the largest relative
difference of each method against ``old``). With ``--globenc``, the run also times the whole
per-batch work of GlobEnc's Table 1 (``correlation_rows``: batched gradient x input saliency,
the maps, rollouts and Spearman correlations) with ``new`` and with ``old`` in place of
``context_mixing``.

Usage:
  python benchmarks/bench_context_mixing_speed.py --threads 1 --n 100 --repeats 3 --globenc
Writes benchmarks/out/bench_context_mixing_speed.json and prints a Markdown table.

Measured on 2026-11-25 on this project's 2-core machine with other jobs running (load average
3.8-5.1), torch 2.13.0 CPU, 1 thread, 100 MNLI pairs (mean 35.7 tokens, 4 length batches), best
of 3: context_mixing old 12.11 s, no-capture 8.41 s, new 6.47 s (1.87x); GlobEnc's Table 1 work
on the same pairs old 12.18 s, new 9.27 s (0.122 -> 0.093 s per example, 1.31x; a run under
heavier load: 0.174 -> 0.128 s, 1.35x). Largest relative difference of any map from ``old``:
3.5e-7 (float32 rounding; attention, W-FixedRes, N, N-FixedRes and N-Res are bit-identical).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

import cmixlib
from cmixlib.methods import dispatch as core, layer_math, norms
from cmixlib.forward.encoding import encode
from cmixlib.forward.prepare import eval_encoder_layers
from cmixlib.forward.encoder import (LayerState, iter_sentences, layer_norm_linear,
                                     layer_norm_scale, run_and_capture)
from cmixlib.experiments.common import _example_batches, padded_batch
from cmixlib.experiments.globenc import GLOBENC_METHODS, correlation_rows
from cmixlib.experiments.sources import Sources


class OldLayerState(LayerState):
    """The LayerState before the change: z cloned from F, T and T' by layer_norm_linear."""

    @cached_property
    def ln1_vectors(self) -> torch.Tensor:
        s = layer_norm_scale(self.mods.ln1, self.ln1_input[self.row_index])
        return layer_norm_linear(self.mods.ln1, self.res_vectors, s[:, None, :])

    @cached_property
    def ln2_vectors(self) -> torch.Tensor:
        s = layer_norm_scale(self.mods.ln2, self.ln2_input[self.row_index])
        return layer_norm_linear(self.mods.ln2, self.ln1_vectors, s[:, None, :])


def _old_attention_mean(st):
    return st.alpha[:, st.row_index, :].mean(dim=0)


def _old_attn_norm(st):
    return torch.linalg.vector_norm(st.attn_vectors, dim=-1)


def _old_w_res(st):
    a = _old_attention_mean(st).clone()
    rr, cc = norms._diag_index(st)
    a[rr, cc] = 0.0
    return layer_math.fixed_residual(a, st.row_index, norms.mixing_ratio(st, "globenc_layer"))


#: The layer functions before the change (no shared maps: N-FixedRes recomputes N, W-Res and
#: W-FixedRes recompute W, N-Res reads the cloned z).
OLD_FUNCTIONS = {
    "attention": _old_attention_mean,
    "attn_norm": _old_attn_norm,
    "attn_norm_res": lambda st: torch.linalg.vector_norm(st.res_vectors, dim=-1),
    "attn_norm_res_ln": lambda st: torch.linalg.vector_norm(st.ln1_vectors, dim=-1),
    "globenc_layer": lambda st: torch.linalg.vector_norm(st.ln2_vectors, dim=-1),
    "w_fixedres": lambda st: layer_math.fixed_residual(_old_attention_mean(st), st.row_index, 0.5),
    "n_fixedres": lambda st: layer_math.fixed_residual(_old_attn_norm(st), st.row_index, 0.5),
    "w_res": _old_w_res,
}


@torch.no_grad()
def old_context_mixing(model, tokenizer, text, methods, normalize=False):
    """The old path for layer-wise methods, full rows, raw maps (what GlobEnc's Table 1 asks)."""
    assert not normalize and all(m in OLD_FUNCTIONS for m in methods)
    mods = eval_encoder_layers(model)
    ids, mask, is_batch = encode(model, tokenizer, text)
    cap = run_and_capture(model, ids, mask)
    out = []
    for b, keep in enumerate(iter_sentences(cap)):
        states = [OldLayerState(mods=m, x=cap.inputs[k][b, keep], o=cap.outputs[k][b, keep],
                                alpha=cap.attentions[k][b][:, keep][:, :, keep])
                  for k, m in enumerate(mods)]
        out.append({name: torch.stack([OLD_FUNCTIONS[name](st) for st in states]).cpu().numpy()
                    for name in methods})
    return out if is_batch else out[0]


@torch.no_grad()
def no_capture_context_mixing(model, tokenizer, text, methods, normalize=False):
    """Today's code with the captured tensors dropped (every state recomputes p, u and the values)."""
    real = core.run_and_capture

    def without(*a, **kw):
        return dataclasses.replace(real(*a, **kw), ln1_inputs=None, ln2_inputs=None, values=None)
    core.run_and_capture = without
    try:
        return core.context_mixing(model, tokenizer, text, methods=methods, normalize=normalize)
    finally:
        core.run_and_capture = real


IMPLEMENTATIONS = {"new": core.context_mixing, "no-capture": no_capture_context_mixing,
                   "old": old_context_mixing}


def interleaved_times(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Times of each function over ``repeats`` rounds, the functions taking turns (order rotating)."""
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for k in range(repeats):
        for name in names[k % len(names):] + names[:k % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def median(xs) -> float:
    xs = sorted(xs)
    return 0.5 * (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n", type=int, default=100, help="MNLI dev pairs")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--globenc", action="store_true", help="also time GlobEnc's correlation_rows")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    bundle = cmixlib.load_classifier("mnli")
    examples = Sources().classification_inputs(bundle, "mnli", args.n)
    pad = getattr(bundle.tokenizer, "pad_token_id", None) or 0
    groups = [[examples[i] for i in idx] for idx in _example_batches(examples)]
    batches = [padded_batch(g, pad) for g in groups]
    lengths = [len(ex["input_ids"]) for ex in examples]

    def run(impl):
        out = []
        for ids, mask in batches:
            maps = IMPLEMENTATIONS[impl](bundle.model, None, {"input_ids": ids, "attention_mask": mask},
                                        methods=GLOBENC_METHODS, normalize=False)
            out += maps if isinstance(maps, list) else [maps]
        return out

    results = {impl: run(impl) for impl in IMPLEMENTATIONS}      # warm-up, and the maps compared
    diffs = {impl: {m: max(float(np.abs(a[m] - b[m]).max() / np.abs(b[m]).max())
                           for a, b in zip(results[impl], results["old"]))
                    for m in GLOBENC_METHODS} for impl in IMPLEMENTATIONS if impl != "old"}
    load0 = os.getloadavg()[0]
    tt = interleaved_times({impl: (lambda impl=impl: run(impl)) for impl in IMPLEMENTATIONS}, args.repeats)
    load1 = os.getloadavg()[0]
    best = {impl: min(v) for impl, v in tt.items()}
    paired = {impl: median(o / t for o, t in zip(tt["old"], tt[impl])) for impl in tt}
    print(f"{args.n} MNLI pairs (mean {np.mean(lengths):.1f} tokens, {len(batches)} batches), "
          f"{args.threads} thread(s), best of {args.repeats}, load average {load0:.1f}-{load1:.1f}")
    print("| implementation | context_mixing (s) | per example (ms) | old / this (best) | "
          "old / this (median of rounds) |")
    print("|---|---|---|---|---|")
    for impl in IMPLEMENTATIONS:
        print(f"| {impl} | {best[impl]:.3f} | {1e3 * best[impl] / args.n:.1f} | "
              f"{best['old'] / best[impl]:.2f}x | {paired[impl]:.2f}x |")
    for impl, d in diffs.items():
        print(f"max relative difference of {impl} vs old:",
              ", ".join(f"{m} {v:.1e}" for m, v in d.items()))
    globenc = {}
    if args.globenc:
        level = "layers"          # saliency at the embedding output, the experiment's default

        def table1(impl):
            real = core.context_mixing
            core.context_mixing = IMPLEMENTATIONS[impl]
            try:
                for g in groups:
                    correlation_rows(bundle, g, GLOBENC_METHODS, level)
            finally:
                core.context_mixing = real
        table1("new")
        gt = interleaved_times({impl: (lambda impl=impl: table1(impl)) for impl in ("new", "old")},
                               args.repeats)
        globenc = {impl: min(v) for impl, v in gt.items()}
        print(f"GlobEnc Table 1 work (correlation_rows, saliency included) on the {args.n} pairs: "
              f"old {globenc['old']:.2f} s ({globenc['old'] / args.n:.3f} s/example), new "
              f"{globenc['new']:.2f} s ({globenc['new'] / args.n:.3f} s/example), "
              f"{globenc['old'] / globenc['new']:.2f}x")
    meta = dict(machine=platform.processor() or platform.machine(), threads=args.threads,
                torch=torch.__version__, n=args.n, mean_tokens=float(np.mean(lengths)),
                repeats=args.repeats, load_average=[load0, load1], model=bundle.describe()
                if hasattr(bundle, "describe") else "mnli classifier")
    out = Path(args.out or Path(__file__).parent / "out" / "bench_context_mixing_speed.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(meta=meta, times=tt, best=best, paired_speedup=paired,
                                   max_rel_diff_vs_old=diffs, globenc_table1_s=globenc), indent=1,
                              default=str))


if __name__ == "__main__":
    main()
