"""Blank-out of a length batch: how many tokens one forward should hold.

`cmixlib.experiments.common.blank_out_rows` runs each example of a padded batch and its n erased
copies through the masked LM, ``BLANK_OUT_TOKENS`` tokens (sequences x padded length) per forward.
This script times one batch of 32 examples of ALTI Table 2's SVA data (about 30 tokens) and of
the BLiMP agreement test half (about 8 tokens) at several chunk sizes, and one sentence at a time,
in the same run (CPU time of the process, one thread, mean of ``--repeats``), and checks that the
scores agree.

    .venv/bin/python benchmarks/bench_blank_out.py --repeats 2
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from cmixlib.book.runs import run_arguments
from cmixlib.experiments.common import padded_batch
from cmixlib.gradients import MLMTarget
from cmixlib.gradients.erasure import blank_out_batch
from cmixlib.experiments.saliency import experiment_inputs


def _inputs(which: str):
    if which == "sva":
        exp, _, s = run_arguments("alti-table2")
        bundle, _, exs = experiment_inputs(exp, s, "sva")
    else:
        exp, _, s = run_arguments("faithfulness", "pretrained")
        bundle, _, exs = experiment_inputs(exp, s)
    # 32 examples of middle length, as a length-sorted batch of the experiments holds
    return bundle, sorted(exs[:400], key=lambda e: len(e["input_ids"]))[200:232]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for which in ("sva", "blimp"):
        bundle, exs = _inputs(which)
        ids, mask = padded_batch(exs, 0)
        n = ids.shape[1]
        targets = [MLMTarget(int(e["target_index"]), int(e["target_id"]), int(e["foil_id"]))
                   for e in exs]

        def run(bs):
            return blank_out_batch(bundle.model, ids, targets, attention_mask=mask,
                                   replacement="mask", tokenizer=bundle.tokenizer,
                                   skip_special=False, batch_size=bs)

        def single():
            return [blank_out_batch(bundle.model, torch.as_tensor([e["input_ids"]]), [t],
                                    replacement="mask", tokenizer=bundle.tokenizer,
                                    skip_special=False)[0] for e, t in zip(exs, targets)]

        def timed(fn):
            t0 = time.process_time()
            for _ in range(args.repeats):
                out = fn()
            return (time.process_time() - t0) / args.repeats, out

        base, ref = timed(single)
        print(f"{which}: 32 examples, padded length {n}, {32 * (n + 1)} sequences")
        print(f"  one example at a time: {base:.2f} s")
        for tokens in (1024, 2048, 4096, 8192, 16384, None):
            sec, got = timed(lambda: run(None if tokens is None else max(1, tokens // n)))
            err = max(float(np.abs(g[:len(r)] - r).max()) for g, r in zip(got, ref))
            label = "whole batch" if tokens is None else f"{tokens} tokens"
            print(f"  {label:>13} per forward: {sec:.2f} s ({base / sec:.2f}x), "
                  f"max |diff| {err:.1e}")


if __name__ == "__main__":
    main()
