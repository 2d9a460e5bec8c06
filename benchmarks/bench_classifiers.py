"""Accuracy of the committed sentence classifiers on their evaluation splits.

An independent evaluation loop: for each task it loads the classifier with
:func:`cmixlib.load_classifier` (committed float16 weights merged into the packaged MiniLM,
checksums verified) and runs a plain loop, one row at a time (no padding, no batching code shared
with training), over the evaluation split of :func:`cmixlib.classifier_weights.task_splits`:
SST-2 GLUE dev (872), HateXplain test (1,924), MNLI dev-matched rows never trained on
(``bundle.heldout_indices``). Targets: SST-2 >= 0.88, HateXplain >= 0.65, MNLI >= 0.65.
``--check-val`` also re-measures the validation accuracy that training selected the weights by
(it must agree with the manifest up to float16 rounding). ``--write-manifest`` stores the results
in each task's ``manifest.json`` under ``"evaluation"`` (what ``make classifier-weights`` does);
``make bench-classifiers`` only prints. Results also go to ``benchmarks/out/classifiers.json``.
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
from cmixlib import classifier_weights as cw

TARGETS = {"sst2": 0.88, "hatexplain": 0.65, "mnli": 0.65}
SPLITS = {"sst2": "GLUE dev", "hatexplain": "test",
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(cw.TASKS), choices=cw.TASKS)
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
                 if "val_accuracy" in r else ""), flush=True)
        if a.write_manifest:
            path = cw.ASSET_DIR / task / "manifest.json"
            man = json.loads(path.read_text())
            man["evaluation"] = r
            path.write_text(json.dumps(man, indent=1) + "\n")
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "classifiers.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
