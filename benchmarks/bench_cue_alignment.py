"""Where the time of the Value Zeroing cue-alignment experiment goes, and how the batched code
compares with the obvious one-sentence-at-a-time implementation.

For a sample of BLiMP agreement test examples and each condition (pre-trained MLM head, prompt
fine-tuned model; both trained and cached by cmixlib.training on first use), it times each group
of methods of ``vz-cue-alignment`` separately:

* ``mixing``: the seven context-mixing maps (attention, N, N-Res, N-ResLN, N-Enc, ALTI, VZ),
  target row only, one padded forward per batch (``cmixlib.experiments.target_rows_batch``);
* ``grad_x_input``, ``integrated_gradients`` (``--ig-steps``), ``deeplift``: one
  ``cmixlib.gradients.batch_attribute`` call per batch;
* the same groups the obvious way (``--reference N`` examples): one sentence at a time, every
  layer's IG / DeepLift with captum's ``LayerIntegratedGradients`` / ``LayerDeepLift`` on the whole
  model, scored from the full logits (what the library did before batching).

It extrapolates to the full test split (2 conditions x 2,360 examples), and with ``--full`` also
runs the real experiment (``cmix run vz-cue-alignment`` for both conditions, cache bypassed) and
reports its wall time. A second part (``--ig-study``) measures how IG converges with the number
of Gauss-Legendre steps: completeness error and Spearman of the maps against 50 steps.

    .venv/bin/python benchmarks/bench_cue_alignment.py --sample 128 --reference 8 --ig-study 64 --full
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")


def _reference_one(bundle, ex, group, ig_steps):
    """The obvious implementation of one group for one sentence (captum Layer* on the full model)."""
    from captum.attr import LayerDeepLift, LayerIntegratedGradients

    from cmixlib.methods import dispatch as core
    from cmixlib import gradients as G
    from cmixlib.experiments import VZ_LAYER_METHODS, mlm_target

    model, tok = bundle.model, bundle.tokenizer
    ids = torch.as_tensor([ex["input_ids"]])
    t = mlm_target(ex, {"grad_score": "prob"})
    if group == "mixing":
        ms = [m for m in VZ_LAYER_METHODS if m in core.METHODS]
        return core.context_mixing(model, tok, {"input_ids": ids}, methods=ms, rows=[t.position])

    class Score(torch.nn.Module):  # full logits, then the score
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids):
            return G.target_score(self.m(input_ids=input_ids).logits, t)

    if group == "grad_x_input":
        from captum.attr import LayerGradientXActivation

        return LayerGradientXActivation(Score(), G.attribution_layers(model, "layers")).attribute(ids)
    base = ids.clone()
    base[0, 1:-1] = tok.mask_token_id
    out = []
    for layer in G.attribution_layers(model, "layers"):
        if group == "integrated_gradients":
            out.append(LayerIntegratedGradients(Score(), layer).attribute(ids, baselines=base, n_steps=ig_steps))
        else:
            with G.deeplift_rescale(model):
                out.append(LayerDeepLift(Score(), layer).attribute(ids, baselines=base))
    return out


def time_groups(bundle, examples, ig_steps, reference):
    from cmixlib.forward.batching import length_batches
    from cmixlib.experiments import BATCH_SIZE, target_rows_batch

    groups = {"mixing": ["attention", "attn_norm", "attn_norm_res", "attn_norm_res_ln", "globenc_layer",
                         "alti_layer", "value_zeroing"],
              "grad_x_input": ["grad_x_input"], "integrated_gradients": ["integrated_gradients"],
              "deeplift": ["deeplift"]}
    settings = {"grad_score": "prob", "grad_aggregate": "l2", "ig_steps": ig_steps}
    rows = {}
    for g, methods in groups.items():
        t0 = time.perf_counter()
        for idx in length_batches([len(e["input_ids"]) for e in examples], BATCH_SIZE):
            target_rows_batch(bundle, [examples[i] for i in idx], methods, settings, level="layers", seeds=list(idx))
        batched = (time.perf_counter() - t0) / len(examples)
        ref = float("nan")
        if reference:
            t0 = time.perf_counter()
            for ex in examples[:reference]:
                _reference_one(bundle, ex, g, ig_steps)
            ref = (time.perf_counter() - t0) / reference
        rows[g] = (batched, ref)
    return rows


def ig_study(bundle, examples, steps_list=(2, 3, 4, 6, 8, 16), ref_steps=50):
    from scipy.stats import spearmanr

    from cmixlib.forward.batching import length_batches
    from cmixlib.experiments import BATCH_SIZE, mlm_target, padded_batch
    from cmixlib.gradients import batch_attribute

    def run(steps):
        maps, deltas = {}, {}
        for idx in length_batches([len(e["input_ids"]) for e in examples], BATCH_SIZE):
            exs = [examples[i] for i in idx]
            ids, mask = padded_batch(exs, bundle.tokenizer.pad_token_id)
            r = batch_attribute(bundle.model, ids, [mlm_target(e, {"grad_score": "prob"}) for e in exs],
                                ["integrated_gradients"], "layers", attention_mask=mask, tokenizer=bundle.tokenizer,
                                n_steps=steps, aggregate="sum", return_delta=True)
            for k, i in enumerate(idx):
                n = len(examples[i]["input_ids"])
                maps[i] = r["integrated_gradients"][k][:, :n]
                deltas[i] = r["integrated_gradients_delta"][k]
        return maps, deltas

    ref, _ = run(ref_steps)
    out = []
    for steps in steps_list:
        maps, deltas = run(steps)
        err, rho = [], []
        for i in maps:
            total = np.abs(ref[i].sum(-1))                       # |f(x) - f(x')| per layer
            keep = total > 1e-3
            err += list(np.abs(deltas[i][keep]) / total[keep])
            rho += [spearmanr(np.abs(maps[i][layer]), np.abs(ref[i][layer])).statistic for layer in range(len(total))]
        out.append((steps, float(np.median(err)), float(np.quantile(err, 0.9)), float(np.nanmedian(rho)),
                    float(np.nanquantile(rho, 0.1))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sample", type=int, default=128, help="examples per condition for the per-group timing")
    ap.add_argument("--reference", type=int, default=8, help="examples for the one-at-a-time reference (0: skip)")
    ap.add_argument("--ig-steps", type=int, default=None, help="default: the experiment's default")
    ap.add_argument("--ig-study", type=int, default=0, help="examples for the IG convergence study (0: skip)")
    ap.add_argument("--full", action="store_true", help="also run the whole experiment, both conditions")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    from cmixlib import training
    from cmixlib.experiments import REGISTRY, blimp_sample, run_experiment

    steps = args.ig_steps or REGISTRY["vz-cue-alignment"].defaults["ig_steps"]
    full_n = None
    for cond in ("pretrained", "finetuned"):
        bundle, _ = (training.load_mlm_model(None, evaluate=False, progress=False) if cond == "pretrained"
                     else training.load_finetuned_mlm(None, progress=False))
        full_n = len(blimp_sample(bundle, None))
        examples = blimp_sample(bundle, args.sample)
        print(f"\n## {cond}: {bundle.describe()}; {len(examples)} examples, mean "
              f"{np.mean([len(e['input_ids']) for e in examples]):.1f} tokens, IG {steps} steps")
        rows = time_groups(bundle, examples, steps, args.reference)
        print("| group | batched (s/example) | one at a time (s/example) | speed-up | full split, batched (s) |")
        print("|---|---|---|---|---|")
        for g, (b, r) in rows.items():
            print(f"| {g} | {b:.4f} | {r:.4f} | {r / b:.1f}x | {b * full_n:.0f} |")
        total = sum(b for b, _ in rows.values())
        print(f"| all | {total:.4f} | {sum(r for _, r in rows.values()):.4f} | | {total * full_n:.0f} |")
        if args.ig_study:
            print(f"\nIG convergence ({args.ig_study} examples; relative completeness error |delta| / |f(x)-f(x')| "
                  "over layers with |f(x)-f(x')| > 1e-3; Spearman of |A| per layer against 50 steps)")
            print("| steps | median error | 90th pct error | median Spearman | 10th pct Spearman |")
            print("|---|---|---|---|---|")
            for s, e50, e90, r50, r10 in ig_study(bundle, blimp_sample(bundle, args.ig_study)):
                print(f"| {s} | {e50:.3g} | {e90:.3g} | {r50:.4f} | {r10:.4f} |")
    if args.full:
        t0 = time.perf_counter()
        for cond in ("pretrained", "finetuned"):
            r = run_experiment("vz-cue-alignment", settings={"condition": cond, "ig_steps": steps}, use_cache=False,
                               progress=False)
            print(f"\nfull vz-cue-alignment, {cond}: {r.meta['data_size']} examples, {r.meta['wall_time_s']:.0f} s")
        print(f"both conditions: {time.perf_counter() - t0:.0f} s (full split: {full_n} examples each)")


if __name__ == "__main__":
    main()
