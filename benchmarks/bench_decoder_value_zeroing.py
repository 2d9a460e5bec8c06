"""Value Zeroing on a pre-LN decoder: cmixlib's batched and factored forms against the per-token
loop that re-runs one layer per zeroed token (issue 28, item 5).

The model is a random Llama shaped like SmolLM2-135M (hidden 576, 9 query heads, 3 key-value
heads, intermediate 1536, 30 layers; a small vocabulary, which Value Zeroing never touches),
float32, eager attention, one thread. For each length n, one sentence of random ids:

- ``loop``: for every layer l and token j, layer l re-run by the model's own module on its
  captured input with a hook zeroing token j's values in every key-value head, distances read
  from its output (n layer calls per layer, each over all n positions);
- ``batched``: :func:`cmixlib.methods.value_zeroing_decoder.value_zeroing_layer` with ``method="batched"``
  (the n(n+1)/2 causal pairs through the model's LN2 and MLP modules at once);
- ``factored``: ``method="factored"`` (the MLP's input projections per head, not per pair),
  ``cold`` including the per-layer head maps (computed once per model and cached), ``warm``
  with them cached.

All in the same process, one run each; the capture forward pass is shared and not counted.
``max |diff|`` is the largest difference of the maps from the loop's.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_decoder_value_zeroing.py [n ...]``.
"""
from __future__ import annotations

import sys
import time

import torch

from cmixlib.methods import value_zeroing_decoder as dm
from cmixlib.forward.decoder import random_decoder, run_decoder
from cmixlib.methods.vz_distances import cosine_distance

SMOLLM2 = dict(hidden=576, heads=9, kv_heads=3, intermediate=1536, layers=30, vocab=1000)


@torch.no_grad()
def vz_loop(cap) -> torch.Tensor:
    """(L, n, n) cosine VZ by re-running each layer once per zeroed token."""
    n = cap.input_ids.shape[0]
    maps = torch.zeros(len(cap.layers), n, n)
    for k, st in enumerate(cap.layers):
        args, kwargs = st.call
        h = st.resid_in[None]
        orig = st.resid_out
        for j in range(n):
            def zero(mod, inp, out, j=j):
                out = out.clone()
                # token j's values in every key-value head (a view: GPT-2's last third)
                st.parts.family.value_output(out)[:, j, :] = 0.0
                return out
            handle = st.parts.value.register_forward_hook(zero)
            try:
                out = st.parts.layer(h, *args[1:], **kwargs)
            finally:
                handle.remove()
            out = out[0] if isinstance(out, (tuple, list)) else out
            maps[k, :, j] = cosine_distance(out[0], orig)
    return maps.tril()


@torch.no_grad()
def vz_ours(cap, method: str) -> torch.Tensor:
    return torch.stack([dm.value_zeroing_layer(st, method=method) for st in cap.layers])


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main(lengths: list[int]) -> None:
    torch.set_num_threads(1)
    model = random_decoder("llama", seed=0, dtype=torch.float32, **SMOLLM2)
    # a short warm-up: first calls of the kernels, not the head maps of the model timed below
    warm = random_decoder("llama", seed=1, dtype=torch.float32, hidden=576, heads=9,
                          kv_heads=3, intermediate=1536, layers=1, vocab=1000)
    wcap = run_decoder(warm, torch.arange(8))
    vz_loop(wcap), vz_ours(wcap, "batched"), vz_ours(wcap, "factored")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, float32, "
          f"SmolLM2-135M-shaped random Llama ({SMOLLM2})")
    print("| n | loop (s) | batched (s) | factored cold (s) | factored warm (s) | "
          "loop / batched | loop / factored cold | loop / factored warm | max abs diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    cold_done = False
    for n in lengths:
        ids = torch.randint(0, SMOLLM2["vocab"], (n,), generator=torch.Generator().manual_seed(n))
        cap = run_decoder(model, ids)
        t_loop, ref = timed(lambda: vz_loop(cap))
        t_bat, bat = timed(lambda: vz_ours(cap, "batched"))
        if not cold_done:
            dm._HEAD_MAPS.clear()
            t_cold, _ = timed(lambda: vz_ours(cap, "factored"))
            cold_done = True
        else:                         # the head maps are cached from the first length on
            t_cold = float("nan")
        t_fac, fac = timed(lambda: vz_ours(cap, "factored"))
        diff = max(float((bat - ref).abs().max()), float((fac - ref).abs().max()))
        print(f"| {n} | {t_loop:.2f} | {t_bat:.2f} | {t_cold:.2f} | {t_fac:.2f} | "
              f"{t_loop / t_bat:.1f} | {t_loop / t_cold:.1f} | {t_loop / t_fac:.1f} | "
              f"{diff:.1e} |", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [16, 32, 64, 128])
