"""Peak memory and time of the decoder methods on SmolLM2-135M (issue 40, item 5).

Each (code, n, methods) configuration runs in a fresh subprocess (peak RSS is per process):
load SmolLM2 offline (``cmixlib.load_model("smollm2")``, float32, eager attention), build a
sequence of n tokens (the BOS, then a fixed English text repeated), run one capture as a warm-up,
record the resident set size, then call ``cmixlib.context_mixing`` once with the methods and
record wall time, CPU time and the peak resident set size of the call (glibc's ``malloc_trim``
first, so that freed heap from loading is not reused unseen; then the kernel's peak, ``VmHWM``,
reset through ``/proc/self/clear_refs`` and read after the call; tracemalloc does not see
torch's allocations). "extra peak" = peak RSS minus the RSS before the call: the memory the
methods needed beyond the loaded model.

``--baseline PATH`` also runs the same configurations with the cmixlib of another checkout (the
code before streaming), where it fits in memory (``--baseline-lengths``).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_decoder_memory.py --lengths 128 512 1024
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

TEXT = ("The keys to the old cabinet are on the table, and the children who found them "
        "were happy because the door had been locked for years. ")

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
import cmixlib
n, methods = int(sys.argv[1]), sys.argv[2].split(",")
b = cmixlib.load_model("smollm2", device="cpu")
tok = b.tokenizer
ids = [b.bos_token_id]
while len(ids) < n:
    ids += tok(sys.argv[3], add_special_tokens=False)["input_ids"]
ids = torch.tensor(ids[:n])
the = int(tok(" the", add_special_tokens=False)["input_ids"][0])
methods = [cmixlib.AltiLogit(target=the) if m == "alti_logit" else m for m in methods]
cmixlib.context_mixing(b.model, None, {"input_ids": ids[:8]}, methods)   # warm-up
def status_kb(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key))
import ctypes
ctypes.CDLL("libc.so.6").malloc_trim(0)       # freed heap back to the system: a tight "before"
with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the current RSS
    f.write("5")
before = status_kb("VmRSS")
t0, c0 = time.perf_counter(), time.process_time()
with torch.no_grad():
    maps = cmixlib.context_mixing(b.model, None, {"input_ids": ids}, methods)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
peak = status_kb("VmHWM")
maps_mb = sum(v.nbytes for v in maps.values()) / 2 ** 20
print(json.dumps({"n": n, "methods": list(maps), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                  "rss_before_mb": round(before / 1024), "peak_rss_mb": round(peak / 1024),
                  "extra_peak_mb": round((peak - before) / 1024), "maps_mb": round(maps_mb, 1),
                  "cmixlib": cmixlib.__file__}))
"""


def run(code: str, n: int, methods: list[str], timeout: int) -> dict:
    env = dict(os.environ, PYTHONPATH=code, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as cwd:      # not the checkout: "-c" puts cwd first
        out = subprocess.run([sys.executable, "-c", CHILD, str(n), ",".join(methods), TEXT],
                             env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if out.returncode:
        return {"n": n, "methods": methods, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024])
    ap.add_argument("--methods", default="attn_norm,attn_norm_res,alti,alti_logit")
    ap.add_argument("--vz-lengths", type=int, nargs="*", default=[128],
                    help="lengths at which value_zeroing is timed on its own")
    ap.add_argument("--baseline", default=None, help="another checkout's root (before)")
    ap.add_argument("--baseline-lengths", type=int, nargs="*", default=[128])
    ap.add_argument("--only-baseline", action="store_true")
    ap.add_argument("--timeout", type=int, default=3600)
    args = ap.parse_args()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    methods = args.methods.split(",")
    rows = []
    jobs = [] if args.only_baseline else [("streamed", here, n, methods) for n in args.lengths]
    jobs += [] if args.only_baseline else [("streamed", here, n, ["value_zeroing"])
                                            for n in args.vz_lengths]
    if args.baseline:
        jobs += [("before", args.baseline, n, methods) for n in args.baseline_lengths]
    for label, code, n, ms in jobs:
        r = dict(run(code, n, ms, args.timeout), code=label)
        rows.append(r)
        print(json.dumps(r), flush=True)
    print("\n| code | methods | n | wall (s) | CPU (s) | RSS before (MB) | peak RSS (MB) | "
          "extra peak (MB) | maps (MB) |\n|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['code']} | {','.join(r['methods'])} | {r['n']} | error: {r['error']} |")
            continue
        print(f"| {r['code']} | {', '.join(r['methods'])} | {r['n']} | {r['wall_s']} | "
              f"{r['cpu_s']} | {r['rss_before_mb']} | {r['peak_rss_mb']} | "
              f"{r['extra_peak_mb']} | {r['maps_mb']} |")


if __name__ == "__main__":
    main()
