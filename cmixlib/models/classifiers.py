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

import importlib.util
import json
import warnings
from dataclasses import asdict
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cmixlib.cache import PACKAGE_DIR, cache_root, file_sha256, stable_hash, verify_files
from cmixlib.models.devices import model_device
from cmixlib.models.hub import ModelLoadError
from cmixlib.models.loading import FALLBACK_NAME, load_model, packaged_model_path
from cmixlib.models.public_checkpoints import PUBLIC_CHECKPOINTS, PublicCheckpoint
from cmixlib.training.classifiers import LABELS, MNLI_SPLIT_SEED, label_ids
from cmixlib.validation import check_bool

#: Folder with one sub-folder per task (``weights.safetensors`` + ``manifest.json``).
ASSET_DIR = PACKAGE_DIR / "assets" / "classifiers"
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
    from cmixlib import data
    from cmixlib.data.loaders import data_file

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
    on ``device`` (None: :func:`cmixlib.models.devices.default_device`, CUDA when available)."""
    labels = LABELS[check_task(task)]
    source = name if name is not None else str(packaged_model_path())
    return load_model(source, task="sequence-classification", allow_fallback=False,
                      device=device, num_labels=len(labels),
                      id2label=dict(enumerate(labels)),
                      label2id={lab: i for i, lab in enumerate(labels)})


def trained_dir(task: str, name: str) -> Path:
    """Cache folder of a classifier trained by the recipe for a model without committed weights."""
    return cache_root() / "classifiers" / f"{task}-{stable_hash([name, task])[:16]}"


def load_classifier(task: str, name: str | None = None, *, folder: str | Path | None = None,
                    device: str | None = None, allow_fallback: bool = True, train: bool = False):
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
    :class:`~cmixlib.ModelLoadError` instead).

    A ``name`` with a public fine-tuned checkpoint for ``task``
    (:data:`~cmixlib.models.public_checkpoints.PUBLIC_CHECKPOINTS`, e.g.
    ``"bert-base-uncased"``) loads that checkpoint (:func:`load_public`) where it loads (the
    Hub reachable, or in the Hugging Face cache), its classes reordered to ours; it is trained by
    the recipe only with ``train=True`` (or when a trained copy is already in the cache), and
    where the checkpoint does not load the committed classifier is used (with a warning) or,
    ``allow_fallback=False``, :class:`~cmixlib.ModelLoadError`. ``bundle.variant`` and
    ``bundle.notes`` say which was used.

    Examples
    --------
    >>> import cmixlib
    >>> b = cmixlib.load_classifier("sst2")                         # doctest: +SKIP
    >>> enc = b.tokenizer("a wonderful, moving film", return_tensors="pt")  # doctest: +SKIP
    >>> b.model.config.id2label[int(b.model(**enc).logits.argmax())]  # doctest: +SKIP
    'positive'
    >>> cmixlib.load_classifier("mnli").heldout_indices[:3]        # doctest: +SKIP
    """

    task = check_task(task)
    check_bool(allow_fallback, "allow_fallback")
    check_bool(train, "train")
    requested, bundle = name, None
    entry = PUBLIC_CHECKPOINTS.get((task, name)) if folder is None else None
    if entry is not None and not train and not (trained_dir(task, name) / "manifest.json").exists():
        try:
            return load_public(entry, device=device)
        except ModelLoadError:
            if not allow_fallback:
                raise ModelLoadError(f"The public checkpoint {entry.id} for {task} does not load "
                                     "here (offline and not cached); load_classifier(..., "
                                     f"train=True) fine-tunes {name} by the recipe instead "
                                     "(hours on a CPU).") from None
            warnings.warn(f"cmixlib: the public checkpoint {entry.id} is not available (offline "
                          f"and not cached); using the committed {task} classifier of the "
                          f"packaged '{FALLBACK_NAME}' instead (train=True would fine-tune "
                          f"{name} by the recipe). Results below come from that model.",
                          stacklevel=2)
            name = None
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
    recipe = PACKAGE_DIR.parent / "tools" / "train_classifiers.py"
    if not recipe.exists():
        raise ClassifierWeightsError(f"No committed weights for {name!r} and the recipe {recipe} "
                                     "is not here: train from a clone of the repository.")
    spec = importlib.util.spec_from_file_location("_cmix_train_classifiers", recipe)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    mod.train_task(task, base=name, out_dir=out, work_dir=out / "work")



def label_order(bundle, task: str, names: tuple[str, ...] | None = None,
                n: int = 200) -> tuple[list[int], float, str]:
    """``(order, accuracy, how)``: ``order[k]`` is our class (:data:`LABELS` ``[task]``) of
    the checkpoint's class ``k``, from its ``config.id2label`` names where they are ours (any
    case), else from ``names``, else measured: the order with the highest accuracy on the first
    ``n`` evaluation rows (:func:`task_splits`), refused (:class:`ClassifierWeightsError`)
    unless it beats chance by 0.15 and every other order by 0.1. ``accuracy``: on those rows."""

    labels = LABELS[task]
    given = [str(v).lower() for _, v in sorted(bundle.model.config.id2label.items())]
    xs, ys = task_splits(task)["eval"]
    xs, ys = xs[:n], np.asarray(ys[:n])
    pred = []
    with torch.no_grad():
        for k in range(0, len(xs), 32):
            part = xs[k:k + 32]
            args = ([a for a, _ in part], [b for _, b in part]) if isinstance(part[0], tuple) \
                else (part,)
            enc = bundle.tokenizer(*args, padding=True, truncation=True, max_length=512,
                                   return_tensors="pt").to(model_device(bundle.model))
            pred.append(bundle.model(**enc).logits.argmax(-1).cpu().numpy())
    p = np.concatenate(pred)
    acc = {o: float((np.asarray(o)[p] == ys).mean()) for o in permutations(range(len(labels)))}
    if sorted(given) == sorted(labels):
        order, how = tuple(labels.index(g) for g in given), "the checkpoint's config.json names"
    elif names is not None:
        order, how = tuple(labels.index(g) for g in names), "the label order its sources state"
    else:
        ranked = sorted(acc.items(), key=lambda kv: -kv[1])
        (order, best), second = ranked[0], ranked[1][1]
        if best < 1 / len(labels) + 0.15 or best - second < 0.1:
            raise ClassifierWeightsError(
                f"The class order of this {task} checkpoint cannot be established: its config "
                f"names {given}, and on {len(ys)} evaluation rows the best order scores "
                f"{best:.2f} (next {second:.2f}). Use load_classifier(..., train=True) instead.")
        how = f"measured: the best of {len(acc)} orders on {len(ys)} evaluation rows"
    return list(order), acc[tuple(order)], how


def load_public(entry: PublicCheckpoint, *, device: str | None = None, n_check: int = 200):
    """The public checkpoint ``entry`` as a classifier of ``entry.task`` with our class order:
    the rows of its output layer are permuted by :func:`label_order` so that class ``j`` is
    :data:`LABELS` ``[task][j]``; ``bundle.manifest`` records the entry, the revision loaded,
    how the order was found and the accuracy measured on ``n_check`` evaluation rows."""

    bundle = load_model(entry.id, task="sequence-classification", allow_fallback=False,
                        device=device)
    head = getattr(bundle.model, "classifier", None)
    labels = LABELS[entry.task]
    if not isinstance(head, torch.nn.Linear) or head.out_features != len(labels):
        raise ClassifierWeightsError(f"{entry.id} has no {len(labels)}-class linear classifier.")
    order, acc, how = label_order(bundle, entry.task, entry.label_names, n_check)
    inv = [order.index(j) for j in range(len(labels))]
    with torch.no_grad():
        head.weight.copy_(head.weight[inv].clone())
        head.bias.copy_(head.bias[inv].clone())
    bundle.model.config.id2label = dict(enumerate(labels))
    bundle.model.config.label2id = {lab: i for i, lab in enumerate(labels)}
    bundle.model.eval()
    revision = getattr(bundle.model.config, "_commit_hash", None)
    split = task_splits(entry.task)
    bundle.variant = f"public checkpoint {entry.id} (fine-tuned on {entry.task})"
    bundle.head_is_pretrained = True
    bundle.notes = [n for n in bundle.notes if "initialised randomly" not in n]
    card = ("" if entry.card_accuracy is None
            else f"; its card: {entry.card_accuracy:.3f} on {entry.accuracy_split}")
    bundle.notes.append(f"Classifier for {entry.task}: the public checkpoint {entry.id} "
                        f"(revision {revision or 'unknown'}, licence "
                        f"{entry.licence or 'not stated'}"
                        f"), class order from {how}; accuracy {acc:.3f} on the first "
                        f"{min(n_check, len(split['eval'][1]))} evaluation rows{card}.")
    bundle.heldout_indices = split["heldout_indices"]
    bundle.manifest = {"task": entry.task, "public_checkpoint": asdict(entry),
                       "revision_loaded": revision, "label_order": how, "class_order": order,
                       "evaluation": {"accuracy": acc, "split": "first rows of the evaluation "
                                      "split", "n": min(n_check, len(split["eval"][1]))}}
    return bundle
