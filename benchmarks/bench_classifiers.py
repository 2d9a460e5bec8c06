"""Accuracy of the committed sentence classifiers on their evaluation splits.

An independent evaluation loop: for each task it loads the classifier with
:func:`cmixlib.load_classifier` (committed float16 weights merged into the packaged MiniLM,
checksums verified) and runs a plain loop, one row at a time (no padding, no batching code shared
with training), over the evaluation split of :func:`cmixlib.models.classifiers.task_splits`:
SST-2 GLUE dev (872), HateXplain test (1,924), MNLI dev-matched rows never trained on
(``bundle.heldout_indices``). Targets: SST-2 >= 0.88, HateXplain >= 0.65, MNLI >= 0.65.
``--check-val`` also re-measures the validation accuracy that training selected the weights by
(it must agree with the manifest up to float16 rounding). ``--write-manifest`` stores the results
in each task's ``manifest.json`` under ``"evaluation"`` (what ``make classifier-weights`` does);
``make bench-classifiers`` only prints. Results also go to ``benchmarks/out/classifiers.json``.

``sst2-student`` is the half-depth student distilled from the SST-2 classifier
(:func:`cmixlib.load_student`, ``make student-weights``): its GLUE dev accuracy (target >= 0.85)
and its agreement with the teacher (the fraction of dev sentences where both predict the same
label; the teacher's predictions come from the same one-row loop), written into its manifest.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

import cmixlib
from cmixlib.models import classifiers as cw

TARGETS = {"sst2": 0.88, "hatexplain": 0.65, "mnli": 0.65, "sst2-student": 0.85}
SPLITS = {"sst2": "GLUE dev", "sst2-student": "GLUE dev", "hatexplain": "test",
          "mnli": "dev-matched rows not used for training (bundle.heldout_indices)"}


@torch.no_grad()
def predict(bundle, inputs) -> np.ndarray:
    """Predicted class id of every input, one forward pass per row."""
    tok, model = bundle.tokenizer, bundle.model
    out = []
    for x in inputs:
        enc = (tok(x[0], x[1], truncation=True, max_length=128, return_tensors="pt")
               if isinstance(x, tuple) else tok(x, truncation=True, max_length=128, return_tensors="pt"))
        out.append(int(model(**enc).logits[0].argmax()))
    return np.asarray(out)


def evaluate(task: str, check_val: bool) -> dict:
    if task == "sst2-student":
        return evaluate_student(check_val)
    t0 = time.perf_counter()
    bundle = cmixlib.load_classifier(task)
    load_s = time.perf_counter() - t0
    d = cw.task_splits(task)
    x, y = d["eval"]
    if task == "mnli":   # the evaluation rows are exactly the held-out ones the bundle names
        rows = cmixlib.data.load_mnli()
        x = [(rows["premise"][i], rows["hypothesis"][i]) for i in bundle.heldout_indices]
        y = [bundle.model.config.label2id[rows["label"][i]] for i in bundle.heldout_indices]
    y = np.asarray(y)
    pred = predict(bundle, x)
    names = [bundle.model.config.id2label[i] for i in range(len(bundle.model.config.id2label))]
    res = {"task": task, "split": SPLITS[task], "n": int(len(y)),
           "accuracy": float((pred == y).mean()), "target": TARGETS[task],
           "majority_baseline": float(np.bincount(y).max() / len(y)),
           "per_class_recall": {n: float((pred[y == i] == i).mean()) for i, n in enumerate(names)},
           "load_s": round(load_s, 2), "eval_s": round(time.perf_counter() - t0 - load_s, 1)}
    if check_val:
        xv, yv = d["val"]
        res["val_accuracy"] = float((predict(bundle, xv) == np.asarray(yv)).mean())
        res["val_accuracy_in_training"] = bundle.manifest["best"]["val_accuracy"]
    return res


def evaluate_student(check_val: bool) -> dict:
    """Dev accuracy of the distilled SST-2 student and its agreement with the teacher."""
    t0 = time.perf_counter()
    student = cmixlib.load_student("sst2")
    load_s = time.perf_counter() - t0
    teacher = cmixlib.load_classifier("sst2")
    d = cw.task_splits("sst2")
    x, y = d["eval"]
    y = np.asarray(y)
    pred, pred_t = predict(student, x), predict(teacher, x)
    names = [student.model.config.id2label[i] for i in range(len(student.model.config.id2label))]
    acc_t = (teacher.manifest.get("evaluation") or {}).get("accuracy")
    res = {"task": "sst2-student", "split": SPLITS["sst2-student"], "n": int(len(y)),
           "accuracy": float((pred == y).mean()), "target": TARGETS["sst2-student"],
           "majority_baseline": float(np.bincount(y).max() / len(y)),
           "per_class_recall": {n: float((pred[y == i] == i).mean()) for i, n in enumerate(names)},
           "teacher_accuracy": float((pred_t == y).mean()),
           "agreement_with_teacher": float((pred == pred_t).mean()),
           "layers": student.model.config.num_hidden_layers,
           "keep_layers": student.manifest["keep_layers"],
           "load_s": round(load_s, 2), "eval_s": round(time.perf_counter() - t0 - load_s, 1)}
    res["retained"] = res["accuracy"] / res["teacher_accuracy"]
    if acc_t is not None and abs(acc_t - res["teacher_accuracy"]) > 1e-9:
        print(f"note: the teacher's manifest says dev accuracy {acc_t:.4f}, measured "
              f"{res['teacher_accuracy']:.4f}", flush=True)
    if check_val:
        xv, yv = d["val"]
        res["val_accuracy"] = float((predict(student, xv) == np.asarray(yv)).mean())
        res["val_accuracy_in_training"] = student.manifest["best"]["val_accuracy"]
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=[*cw.TASKS, "sst2-student"],
                    choices=(*cw.TASKS, "sst2-student"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--check-val", action="store_true")
    ap.add_argument("--write-manifest", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    results = []
    for task in a.tasks:
        r = evaluate(task, a.check_val)
        r.update(measured_by="benchmarks/bench_classifiers.py", torch=torch.__version__,
                 date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                 hardware=f"{platform.machine()}, {a.threads} torch thread(s)")
        results.append(r)
        ok = "meets" if r["accuracy"] >= r["target"] else "BELOW"
        print(f"{task:10s} {r['split']}: accuracy {r['accuracy']:.4f} on {r['n']} rows "
              f"({ok} target {r['target']}; majority {r['majority_baseline']:.3f}; "
              f"load {r['load_s']} s, eval {r['eval_s']} s)"
              + (f"; val {r['val_accuracy']:.4f} (training: {r['val_accuracy_in_training']:.4f})"
                 if "val_accuracy" in r else "")
              + (f"; agreement with the teacher {r['agreement_with_teacher']:.4f} (teacher "
                 f"{r['teacher_accuracy']:.4f})" if "agreement_with_teacher" in r else ""), flush=True)
        if a.write_manifest:
            path = (cmixlib.models.student.student_dir("sst2") if task == "sst2-student"
                    else cw.ASSET_DIR / task) / "manifest.json"
            man = json.loads(path.read_text())
            man["evaluation"] = r
            path.write_text(json.dumps(man, indent=1) + "\n")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "classifiers.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
