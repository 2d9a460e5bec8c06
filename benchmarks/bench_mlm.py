"""Accuracy of the "pre-trained" MLM the book uses, and of its prompt-fine-tuned copy.

Prints, for the model that loads (bert-base-uncased where it can, else the offline
all-MiniLM-L6-v2 + MLM adaptation of cmixlib.models.mlm_adapted): BLiMP agreement accuracy on the test
split overall and per subset (logit of the right word > logit of the foil at [MASK]; targets
>= 0.80 overall and >= 0.65 per subset; the Value Zeroing paper's BERT: 0.96) and masked-word
top-1 accuracy on the held-out passages of data/mlm_heldout (target >= 0.30), then the learning
curve recorded when the adaptation was trained. Run: `make bench-mlm` (about 4 min on 2 cores
with the fine-tuned model cached, plus its training otherwise).
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from cmixlib.models import mlm_adapted
from cmixlib import training


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model name (default: $CMIX_MODEL)")
    ap.add_argument("--no-finetuned", action="store_true", help="skip the fine-tuned condition")
    args = ap.parse_args()
    rows = {}
    t0 = time.perf_counter()
    bundle, info = training.load_mlm_model(args.model, progress=False)
    rows["pre-trained"] = info["metrics"]
    print(bundle.describe())
    if not args.no_finetuned:
        ft, finfo = training.load_finetuned_mlm(args.model, pretrained=(bundle, info),
                                                progress=False)
        rows["fine-tuned"] = training.mlm_metrics(ft, finfo["cache_key"])
    table = pd.DataFrame({
        cond: {"agreement": m["agreement_accuracy_test"], **m["agreement_by_subset"],
               "masked-word (ELTeC held-out)": m["masked_word_accuracy_eltec"],
               "masked-word (WikiText-2 held-out)": m["masked_word_accuracy_wikitext2"]}
        for cond, m in rows.items()})
    print(table.round(3).to_string())
    print(f"({time.perf_counter() - t0:.0f} s)")
    if info["kind"] == "mlm-adapted":
        curve = pd.DataFrame([{"step": r["step"], "tokens (M)": r["tokens"] / 1e6,
                               "loss": r["loss"], "masked-word": r["masked_word_accuracy"],
                               "agreement": r["agreement_accuracy"], **r["agreement_by_subset"]}
                              for r in mlm_adapted.learning_curve()])
        print("\nLearning curve of the adaptation (recorded on", mlm_adapted.manifest()["device"],
              "; masked-word on 2,000 held-out passages):")
        print(curve.round(3).to_string(index=False))


if __name__ == "__main__":
    main()
