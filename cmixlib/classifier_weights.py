"""Sentence classifiers (SST-2, MNLI, HateXplain) that do their tasks, trained once and loaded offline.

``tools/train_classifiers.py`` (``make classifier-weights``) fine-tunes the packaged
``all-MiniLM-L6-v2`` per task with low-rank adapters (LoRA, Hu et al. 2022) on every linear map of
the six encoder layers (query, key, value, attention output, intermediate, output), while the
LayerNorms, the pooler and a fresh classification head are trained in full. Only those tensors are
committed, in float16, under ``cmixlib/assets/classifiers/<task>/`` with a ``manifest.json``
(sha256 of each file, recipe, data fingerprints, settings, wall time, hardware, and the accuracy
that ``benchmarks/bench_classifiers.py`` measured on the evaluation split).

Loading merges each adapter into its frozen weight, so the result is a plain
``BertForSequenceClassification`` with no extra modules:

.. math::

    W' = W + \\frac{\\alpha}{r} B A, \\qquad A \\in \\mathbb{R}^{r \\times d_\\text{in}},
    \\; B \\in \\mathbb{R}^{d_\\text{out} \\times r},

and the classifier computes ``p(y | x) = softmax(W_c tanh(W_p h_[CLS] + b_p) + b_c)``.

Data (:func:`task_splits`): SST-2 GLUE train minus 2,000 seeded validation phrases / dev (872);
HateXplain train / val (tuning) / test; MNLI: the 6,273 TaxiNLI pairs outside dev-matched plus the
dev-matched rows beyond the first :data:`MNLI_HELDOUT` of the seeded permutation
(:data:`~cmixlib.training.MNLI_SPLIT_SEED`), whose indices are the evaluation rows
(``bundle.heldout_indices``); they include the 2,000 "dev" rows of :func:`cmixlib.training.classification_data`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .cache import file_sha256, verify_files

#: Folder with one sub-folder per task (``weights.safetensors`` + ``manifest.json``).
ASSET_DIR = Path(__file__).resolve().parent / "assets" / "classifiers"
#: Tasks with committed weights (the order of ``cmixlib.training.CLASSIFIER_TASKS``).
TASKS = ("sst2", "mnli", "hatexplain")
#: Linear maps of each encoder layer that carry a LoRA adapter.
LORA_TARGETS = ("attention.self.query", "attention.self.key", "attention.self.value",
                "attention.output.dense", "intermediate.dense", "output.dense")
#: Rows of the seeded permutation of MNLI dev-matched kept for evaluation (never trained on).
MNLI_HELDOUT = 4000
#: Validation rows carved (seeded) from SST-2 train, and from the MNLI training pool.
SST2_VAL, MNLI_VAL, VAL_SEED = 2000, 600, 1234


class ClassifierWeightsError(RuntimeError):
    """The committed classifier weights are missing, altered, or do not fit the model."""


def check_task(task: str) -> str:
    """The canonical task name; a clear ``ValueError`` for any other value."""
    t = task.lower().replace("-", "") if isinstance(task, str) else task
    if t not in TASKS:
        raise ValueError(f"Unknown classifier task={task!r}; allowed values: {', '.join(TASKS)}.")
    return t


#: Hex sha256 of a file's bytes (:func:`cmixlib.cache.file_sha256`).
sha256_file = file_sha256


def task_splits(task: str) -> dict[str, Any]:
    """``{"train", "val", "eval": (inputs, label ids), "heldout_indices", "files", "description"}``.

    ``inputs`` are strings or ``(premise, hypothesis)`` pairs; ``files`` are the data files read
    (their sha256 is the manifest's data fingerprint); ``heldout_indices`` are the row indices of
    the evaluation file that form ``eval`` (None when the whole split is evaluated).
    """
    from . import data
    from .data.loaders import data_file
    from .training import MNLI_SPLIT_SEED, label_ids

    task = check_task(task)
    rng = np.random.default_rng(VAL_SEED)
    held = None
    if task == "sst2":
        tr, ev = data.load_sst2("train"), data.load_sst2("dev")
        x, y = list(tr["sentence"]), label_ids(tr["label"], task)
        perm = rng.permutation(len(x))
        val, trn = perm[:SST2_VAL], np.sort(perm[SST2_VAL:])
        xe, ye = list(ev["sentence"]), label_ids(ev["label"], task)
        files = [data_file("sst2", "train.tsv"), data_file("sst2", "dev.tsv")]
        desc = f"SST-2 GLUE train minus {SST2_VAL} validation phrases / GLUE dev (evaluation)"
    elif task == "hatexplain":
        tr, va, ev = (data.load_hatexplain(s) for s in ("train", "val", "test"))
        x = list(tr["text"]) + list(va["text"])
        y = label_ids(list(tr["label"]) + list(va["label"]), task)
        trn, val = np.arange(len(tr)), np.arange(len(tr), len(x))
        xe, ye = list(ev["text"]), label_ids(ev["label"], task)
        files = [data_file("hatexplain", f"{s}.json") for s in ("train", "val", "test")]
        desc = "HateXplain official train / val (tuning) / test (evaluation), majority labels"
    else:
        import pandas as pd

        dm = data.load_mnli()
        pairs = list(zip(dm["premise"], dm["hypothesis"]))
        order = np.random.default_rng(MNLI_SPLIT_SEED).permutation(len(dm))
        held = np.sort(order[:MNLI_HELDOUT])
        seen = {(a.strip(), b.strip()) for a, b in pairs}
        tx_path = data_file("mnli", "taxinli10k.tsv")
        tx = pd.read_csv(tx_path, sep="\t", quoting=3, keep_default_na=False, dtype=str)
        keep = [(p, h, lab) for p, h, lab in zip(tx["prem"], tx["hyp"], tx["label"])
                if (p.strip(), h.strip()) not in seen]
        rows = sorted(order[MNLI_HELDOUT:].tolist())
        x = [(p, h) for p, h, _ in keep] + [pairs[i] for i in rows]
        y = label_ids([lab for *_, lab in keep] + [dm["label"][i] for i in rows], task)
        perm = rng.permutation(len(x))
        val, trn = perm[:MNLI_VAL], np.sort(perm[MNLI_VAL:])
        xe, ye = [pairs[i] for i in held], label_ids([dm["label"][i] for i in held], task)
        files = [tx_path, data_file("mnli", "dev_matched.jsonl")]
        desc = (f"MNLI: {len(keep)} TaxiNLI pairs outside dev-matched + {len(rows)} dev-matched rows "
                f"(minus {MNLI_VAL} validation pairs) / {len(held)} held-out dev-matched rows "
                f"(first {MNLI_HELDOUT} of the permutation with seed {MNLI_SPLIT_SEED})")
    return {"train": ([x[i] for i in trn], [y[i] for i in trn]),
            "val": ([x[i] for i in val], [y[i] for i in val]), "eval": (xe, ye),
            "heldout_indices": None if held is None else held.tolist(), "files": files,
            "description": desc}


def lora_module_names(model: torch.nn.Module) -> list[str]:
    """Dotted names of the linear maps that carry adapters (:data:`LORA_TARGETS` in every layer)."""
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
            and ".encoder.layer." in n and n.split(".layer.")[1].split(".", 1)[1] in LORA_TARGETS]


def full_param_names(model: torch.nn.Module) -> list[str]:
    """Parameters trained (and stored) in full: every LayerNorm, the pooler, the classifier."""
    return [n for n, _ in model.named_parameters()
            if "LayerNorm" in n or ".pooler." in n or n.startswith("classifier.")]


@torch.no_grad()
def merge_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], scale: float) -> None:
    """Write ``state`` into ``model`` in place: ``<name>.lora_A``/``lora_B`` pairs are merged as
    ``W += scale * B @ A``; every other tensor replaces the parameter of that name."""
    params = dict(model.named_parameters())
    for key, value in state.items():
        if key.endswith(".lora_B"):
            continue
        if key.endswith(".lora_A"):
            base = key[: -len(".lora_A")]
            w, b = params.get(base + ".weight"), state.get(base + ".lora_B")
            if w is None or b is None or (b.shape[0], value.shape[1]) != tuple(w.shape):
                raise ClassifierWeightsError(f"The adapter {base} does not fit this model.")
            w += scale * (b.to(w.device, w.dtype) @ value.to(w.device, w.dtype))
        elif key in params and params[key].shape == value.shape:
            params[key].copy_(value.to(params[key].device, params[key].dtype))
        else:
            raise ClassifierWeightsError(f"The stored tensor {key} {tuple(value.shape)} does not "
                                         "fit this model.")


def read_manifest(folder: Path) -> dict[str, Any]:
    """The ``manifest.json`` of a weights folder (a clear error when missing)."""
    path = Path(folder) / "manifest.json"
    if not path.exists():
        raise ClassifierWeightsError(f"{path} is missing: restore cmixlib/assets/classifiers from "
                                     "git or rebuild it with `make classifier-weights`.")
    return json.loads(path.read_text())


def verified_state(folder: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The stored tensors and the manifest, after checking every file's sha256."""
    from safetensors.torch import load_file

    man = read_manifest(Path(folder))
    state: dict[str, torch.Tensor] = {}
    for path in verify_files(folder, man["sha256"], ClassifierWeightsError,
                             "cmixlib/assets/classifiers", "make classifier-weights"):
        state.update(load_file(str(path)))
    return state, man


def build_model(task: str, name: str | None = None, *, device: str | None = None):
    """A ``ModelBundle`` with a fresh sequence-classification head whose ``id2label`` /
    ``label2id`` hold :data:`cmixlib.training.LABELS` ``[task]`` (``name`` None: packaged MiniLM),
    on ``device`` (None: :func:`cmixlib.models.default_device`, CUDA when available)."""
    from .models import load_model, packaged_model_path
    from .training import LABELS

    labels = LABELS[check_task(task)]
    source = name if name is not None else str(packaged_model_path())
    return load_model(source, task="sequence-classification", allow_fallback=False,
                      device=device, num_labels=len(labels),
                      id2label=dict(enumerate(labels)),
                      label2id={lab: i for i, lab in enumerate(labels)})


def trained_dir(task: str, name: str) -> Path:
    """Cache folder of a classifier trained by the recipe for a model without committed weights."""
    from .cache import cache_root, stable_hash

    return cache_root() / "classifiers" / f"{task}-{stable_hash([name, task])[:16]}"


def load_classifier(task: str, name: str | None = None, *, folder: str | Path | None = None,
                    device: str | None = None, allow_fallback: bool = True):
    """A sequence classifier that does ``task`` (``"sst2"``, ``"mnli"`` or ``"hatexplain"``).

    ``name`` None (default): the packaged ``all-MiniLM-L6-v2`` with the committed weights of
    ``cmixlib/assets/classifiers/<task>/`` (or ``folder``) merged in (:func:`merge_weights`),
    after checking each file's sha256 against ``manifest.json`` (:class:`ClassifierWeightsError`
    otherwise). Any other ``name`` (e.g. ``"bert-base-uncased"`` where it loads): trained once by
    the same recipe (``tools/train_classifiers.py``, hours on a CPU) into the cache, then loaded.
    The bundle is in eval mode with eager attention; ``model.config.id2label`` holds the label
    names; ``bundle.heldout_indices`` lists the evaluation rows of MNLI dev-matched never trained
    on (None for SST-2 and HateXplain, whose evaluation splits are untouched) and
    ``bundle.manifest`` the training record. A ``name`` that cannot be loaded (offline, not cached)
    falls back, with a warning, to the committed classifier, as :func:`cmixlib.load_model` falls
    back to the packaged encoder (``bundle.is_fallback``; ``allow_fallback=False``:
    :class:`~cmixlib.models.ModelLoadError` instead).

    Examples
    --------
    >>> import cmixlib
    >>> b = cmixlib.load_classifier("sst2")                         # doctest: +SKIP
    >>> enc = b.tokenizer("a wonderful, moving film", return_tensors="pt")  # doctest: +SKIP
    >>> b.model.config.id2label[int(b.model(**enc).logits.argmax())]  # doctest: +SKIP
    'positive'
    >>> cmixlib.load_classifier("mnli").heldout_indices[:3]        # doctest: +SKIP
    """
    import warnings

    from .models import FALLBACK_NAME, ModelLoadError
    from .validation import check_bool

    task = check_task(task)
    check_bool(allow_fallback, "allow_fallback")
    requested, bundle = name, None
    if folder is None and name is not None:
        try:
            bundle = build_model(task, name, device=device)
        except ModelLoadError:
            if not allow_fallback:
                raise
            warnings.warn(f"cmixlib: {name!r} is not available (offline and not cached); using the "
                          f"committed {task} classifier of the packaged '{FALLBACK_NAME}' instead. "
                          "Results below come from that model.", stacklevel=2)
            name = None
    if folder is None and name is not None:
        folder = trained_dir(task, name)
        if not (Path(folder) / "manifest.json").exists():
            _train_with_recipe(task, name, Path(folder))
    committed = folder is None
    folder = Path(folder) if folder is not None else ASSET_DIR / task
    state, man = verified_state(folder)
    if man.get("task") != task:
        raise ClassifierWeightsError(f"{folder} holds weights for {man.get('task')!r}, not {task!r}.")
    bundle = bundle if bundle is not None else build_model(task, name, device=device)
    merge_weights(bundle.model, state, float(man["settings"]["lora_alpha"]) / man["settings"]["lora_r"])
    bundle.model.eval()
    if name is None:                   # the packaged encoder: named as load_model names it
        bundle.name, bundle.requested = FALLBACK_NAME, requested or FALLBACK_NAME
        bundle.is_fallback = requested is not None
    bundle.variant = (f"fine-tuned on {task}" + (" (committed weights)" if committed else
                                                 f" (weights from {folder})"))
    bundle.head_is_pretrained = True   # the head is the committed, trained one
    bundle.notes = [n for n in bundle.notes if "initialised randomly" not in n]
    acc = (man.get("evaluation") or {}).get("accuracy")
    bundle.notes.append(f"Classifier for {task} from {folder} (LoRA r={man['settings']['lora_r']} "
                        "merged)" + (f"; evaluation accuracy {acc:.3f}." if acc is not None else "."))
    bundle.heldout_indices = man.get("heldout_indices")
    bundle.manifest = man
    return bundle


def _train_with_recipe(task: str, name: str, out: Path) -> None:
    """Run ``tools/train_classifiers.py``'s :func:`train_task` for ``name`` into ``out``."""
    import importlib.util

    recipe = Path(__file__).resolve().parents[1] / "tools" / "train_classifiers.py"
    if not recipe.exists():
        raise ClassifierWeightsError(f"No committed weights for {name!r} and the recipe {recipe} "
                                     "is not here: train from a clone of the repository.")
    spec = importlib.util.spec_from_file_location("_cmix_train_classifiers", recipe)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    mod.train_task(task, base=name, out_dir=out, work_dir=out / "work")

