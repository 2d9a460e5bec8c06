"""A half-depth SST-2 student distilled from the committed classifier (ALTI Figure 7's DistilBERT).

ALTI (Ferrando et al. 2022) compares the explanations of two SST-2 classifiers, BERT and
DistilBERT. DistilBERT (Sanh et al. 2019) has half of BERT's layers, is initialised from BERT by
"taking one layer out of two", and is trained by distillation. The offline counterpart here:

* teacher: :func:`cmixlib.load_classifier` ``("sst2")``, the packaged 6-layer ``all-MiniLM-L6-v2``
  fine-tuned on SST-2 (LoRA merged);
* student: the teacher's embeddings, its encoder layers :data:`KEEP_LAYERS` (every other layer
  counted from the top, so that the last layer, the one the pooler and head read, is kept), its
  pooler and head, as a plain 3-layer ``BertForSequenceClassification``;
* training (``tools/distill_student.py``, ``make student-weights``): soft-target cross-entropy
  with the teacher's logits at temperature ``T`` (scaled by ``T**2``), hard-label cross-entropy
  and a cosine loss aligning the student's hidden states with the teacher's corresponding ones
  (embeddings with embeddings, student layer ``k`` with teacher layer ``2k + 1``), on SST-2
  train (:func:`cmixlib.models.classifiers.task_splits`), selected on its validation split only.

What is committed under ``cmixlib/assets/classifiers/sst2-student/`` is small: LoRA adapters
(rank 16) relative to the teacher's merged weights of the kept layers, plus every LayerNorm, the
pooler and the head, in float16; the word, position and type embeddings stay the packaged ones.
:func:`load_student` rebuilds the teacher, keeps its layers, merges the adapters and checks every
sha256 (the student's files and the teacher it was distilled from).
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch

from cmixlib.models import classifiers as cw

#: Teacher layers (0-based) the student keeps, in order: student layer ``k`` is teacher layer ``2k + 1``.
KEEP_LAYERS = (1, 3, 5)
#: Tasks with a committed student.
STUDENT_TASKS = ("sst2",)


def student_dir(task: str = "sst2") -> Path:
    """Folder of the committed student weights of ``task``."""
    return cw.ASSET_DIR / f"{_check_student_task(task)}-student"


def _check_student_task(task: str) -> str:
    t = cw.check_task(task)
    if t not in STUDENT_TASKS:
        raise ValueError(f"No distilled student for task={task!r}; allowed values: "
                         f"{', '.join(STUDENT_TASKS)}.")
    return t


def prune_layers(model: torch.nn.Module, keep: tuple[int, ...] | list[int]) -> torch.nn.Module:
    """A deep copy of a BERT-family ``model`` with only the encoder layers ``keep`` (in that order);
    embeddings, pooler and head are copied unchanged and ``config.num_hidden_layers`` updated."""
    keep = [int(i) for i in keep]
    layers = model.base_model.encoder.layer
    if not keep or any(not 0 <= i < len(layers) for i in keep):
        raise ValueError(f"keep={keep} must name layers of a {len(layers)}-layer encoder.")
    out = copy.deepcopy(model)
    out.base_model.encoder.layer = torch.nn.ModuleList([out.base_model.encoder.layer[i] for i in keep])
    out.config.num_hidden_layers = len(keep)
    for k, layer in enumerate(out.base_model.encoder.layer):
        attn = getattr(layer.attention, "self", None)
        for mod in (layer, attn):
            if mod is not None and hasattr(mod, "layer_idx"):
                mod.layer_idx = k
    return out


def build_student(teacher_bundle, keep: tuple[int, ...] | list[int] = KEEP_LAYERS):
    """The initial student: a ``ModelBundle`` sharing the teacher's tokenizer, whose model is
    :func:`prune_layers` of the teacher's (its weights before any distillation)."""
    b = copy.copy(teacher_bundle)
    b.model = prune_layers(teacher_bundle.model, keep)
    b.notes = list(teacher_bundle.notes)
    return b


def load_student(task: str = "sst2", *, folder: str | Path | None = None, device: str | None = None):
    """The distilled half-depth student of :func:`cmixlib.load_classifier` ``(task)`` (SST-2 only).

    Returns a ``ModelBundle`` whose model is a plain 3-layer ``BertForSequenceClassification``
    (eval mode, eager attention, ``config.id2label`` ``{0: "negative", 1: "positive"}``): the
    teacher's layers :data:`KEEP_LAYERS` with the committed adapters of
    ``cmixlib/assets/classifiers/<task>-student/`` (or ``folder``) merged in. Every file's sha256
    is checked against ``manifest.json``, and so is the teacher's (the adapters are relative to the
    teacher's merged weights); a mismatch raises :class:`~cmixlib.models.classifiers.ClassifierWeightsError`.
    ``bundle.manifest`` is the training record (``"keep_layers"``, curve, evaluation).

    Examples
    --------
    >>> import cmixlib
    >>> s = cmixlib.load_student("sst2")                               # doctest: +SKIP
    >>> s.model.config.num_hidden_layers, s.manifest["keep_layers"]    # doctest: +SKIP
    (3, [1, 3, 5])
    """
    task = _check_student_task(task)
    folder = Path(folder) if folder is not None else student_dir(task)
    state, man = cw.verified_state(folder)
    if man.get("task") != task or "keep_layers" not in man:
        raise cw.ClassifierWeightsError(f"{folder} does not hold a distilled {task} student.")
    teacher = cw.load_classifier(task, device=device)
    want = (man.get("teacher") or {}).get("sha256")
    have = teacher.manifest["sha256"]
    if want != have:
        raise cw.ClassifierWeightsError(
            f"The student in {folder} was distilled from the {task} classifier with sha256 {want}, "
            f"but the committed one has {have}: rebuild it with `make student-weights`.")
    bundle = build_student(teacher, man["keep_layers"])
    cw.merge_weights(bundle.model, state, float(man["settings"]["lora_alpha"]) / man["settings"]["lora_r"])
    bundle.model.eval()
    bundle.name = f"{teacher.name} (distilled student)"
    bundle.variant = (f"distilled from the {task} classifier, layers "
                      f"{', '.join(map(str, man['keep_layers']))} kept")
    acc = (man.get("evaluation") or {}).get("accuracy")
    bundle.notes = [n for n in bundle.notes if not n.startswith("Classifier for")]
    bundle.notes.append(f"Distilled {task} student from {folder}"
                        + (f"; evaluation accuracy {acc:.3f}." if acc is not None else "."))
    bundle.heldout_indices = None
    bundle.manifest = man
    return bundle
