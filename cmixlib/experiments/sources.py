"""Where the experiments' models and examples come from: :class:`Sources` (the seam for running
an experiment on your own models or data, and for tests) and the declarations of what an
experiment reads (:class:`Model`, :class:`Data`, :class:`Inputs`).

The default :class:`Sources` loads the real models (the Value Zeroing experiments' MLM for a
condition, :func:`load_condition_mlm`; a classifier fine-tuned on a task; the bare encoder; ALTI
Figure 7's second classifier) through :mod:`cmixlib.training` / :mod:`cmixlib.models.loading`, and the
real data through :mod:`cmixlib.data` (BLiMP agreement, :func:`blimp_sample`; SST-2; SVA; the
dev split of a classification task)."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from cmixlib.models.arch import num_layers
from cmixlib.experiments.spec import RunSpec
from cmixlib import data, training
from cmixlib.data.hatexplain import load_hatexplain_rationale_inputs
from cmixlib.models.classifiers import load_classifier, task_splits
from cmixlib.models.hub import ModelLoadError
from cmixlib.models.loading import load_model
from cmixlib.models.student import load_student

__all__ = ["Sources", "Model", "ModelByCondition", "Data", "Inputs", "whole_split",
           "load_condition_mlm", "blimp_sample", "SST2_CLASSIFIER",
           "CLASSIFIER_SETTINGS", "FINETUNED_MLM_SETTINGS"]

#: Settings (with their defaults) of an experiment that reads a classifier (:meth:`Sources.classifier`):
#: all None, the classifiers of :func:`cmixlib.load_classifier` (committed for the offline model,
#: trained by the same recipe for any other); a number of training examples instead fine-tunes
#: the run's model briefly (:func:`cmixlib.training.train_classifier`; quick mode, tests).
CLASSIFIER_SETTINGS = {"cls_epochs": None, "cls_max_train_examples": None, "cls_max_dev_examples": None}

#: Settings of an experiment that reads the fine-tuned MLM (:func:`load_condition_mlm`; None:
#: :mod:`cmixlib.training`'s defaults).
FINETUNED_MLM_SETTINGS = {"ft_epochs": None, "ft_max_train_examples": None}


def load_condition_mlm(condition: str, settings: Mapping | None = None, model: str | None = None,
                       progress: bool = False):
    """``(bundle, info)`` of the Value Zeroing experiments' MLM for ``condition``: the
    pre-trained MLM (:func:`cmixlib.training.load_mlm_model`) or its prompt-fine-tuned copy
    (:func:`cmixlib.training.load_finetuned_mlm`; ``settings`` may hold the experiments'
    ``ft_epochs`` and ``ft_max_train_examples``), exactly as the experiments load them."""
    settings = settings or {}
    ft = {kw: settings[key] for key, kw in (("ft_epochs", "epochs"),
                                            ("ft_max_train_examples", "max_train_examples"))
          if settings.get(key) is not None}
    loaders = {"pretrained": lambda: training.load_mlm_model(model, evaluate=False, progress=progress),
               "finetuned": lambda: training.load_finetuned_mlm(model, progress=progress, **ft)}
    if condition not in loaders:
        raise ValueError(f"condition must be 'pretrained' or 'finetuned', not {condition!r}")
    return loaders[condition]()


def blimp_sample(bundle, limit: int | None) -> list[dict]:
    """BLiMP agreement test split; with ``limit``, a seeded random sample (numpy seed 0) kept in
    split order, so that a small run still mixes the five subsets (the split is grouped by subset)."""
    ex = data.load_blimp_agreement(bundle.tokenizer, split="test")
    if limit is None or limit >= len(ex):
        return ex
    keep = sorted(np.random.default_rng(0).choice(len(ex), size=limit, replace=False).tolist())
    return [ex[i] for i in keep]


class Sources:
    """The models and examples of a run. Subclass it and override any method to run an
    experiment on your own models or data: ``run_experiment(name, model="my-model",
    sources=MySources())`` (the cache knows the model only by that name).

    Models come as ``(bundle, info)``: ``bundle`` has ``.model`` and ``.tokenizer`` (and may have
    ``.describe()``, ``.name``, ``.is_fallback``, as :class:`cmixlib.ModelBundle`); ``info`` is
    a dict (``"accuracy"`` is reported) or None. Examples are lists of dicts as
    :mod:`cmixlib.data` returns them: every one has ``input_ids``; BLiMP and SVA examples also
    ``target_index``, ``target_id``, ``foil_id`` (BLiMP: ``cue_indices``, ``label``
    singular/plural); SST-2 sentences ``tokens`` and ``label``; classification inputs ``label``.

    :func:`run_experiment` hands the experiment a copy bound to the run (:meth:`bind`), so a
    method can read :attr:`spec` (the frozen :class:`~cmixlib.experiments.spec.RunSpec`: model
    name, limit, settings, progress) and write to the run's notes with :meth:`note`.
    """

    spec: RunSpec | None = None
    _note_sink: Callable[[str], None] | None = None

    def bind(self, spec: RunSpec, note: Callable[[str], None] | None = None) -> "Sources":
        """A copy of these sources for the run ``spec``; ``note(text)`` records a note of the run."""
        if not isinstance(spec, RunSpec):
            raise TypeError(f"Sources.bind takes a RunSpec, not {type(spec).__name__}.")
        bound = copy.copy(self)
        bound.spec, bound._note_sink = spec, note
        return bound

    def note(self, text: str) -> None:
        """Add ``text`` to the run's notes (``meta.json``); nothing when unbound."""
        if self._note_sink is not None:
            self._note_sink(text)

    # the run's model name, settings and progress flag (defaults when unbound)
    @property
    def _model(self) -> str | None:
        return self.spec.model if self.spec is not None else None

    @property
    def _settings(self) -> Mapping:
        return self.spec.settings if self.spec is not None else {}

    @property
    def _progress(self) -> bool:
        return self.spec.progress if self.spec is not None else False

    def mlm(self, condition: str) -> tuple[Any, dict | None]:
        """The Value Zeroing experiments' MLM for ``condition`` (:func:`load_condition_mlm`)."""
        return load_condition_mlm(condition, self._settings, self._model, self._progress)

    def train_classifier(self, task: str, model: str | None, **kw) -> tuple[Any, dict | None]:
        """``model`` fine-tuned on ``task`` (:func:`cmixlib.training.train_classifier`, cached):
        how :meth:`classifier` and :meth:`model_b` get their classifiers."""
        return training.train_classifier(task, model, **kw)

    def _classifier_kw(self) -> dict:
        """Training arguments from the run's ``cls_max_train_examples``, ``cls_epochs`` (None: 2)
        and ``cls_max_dev_examples`` (the dev rows its accuracy is measured on; None: all)."""
        s = self._settings
        return dict(max_train_examples=s.get("cls_max_train_examples"),
                    max_dev_examples=s.get("cls_max_dev_examples"),
                    epochs=s.get("cls_epochs") or 2, progress=self._progress)

    def classifier(self, task: str) -> tuple[Any, dict | None]:
        """The run's model fine-tuned on ``task``: with ``cls_max_train_examples`` None (default),
        :func:`cmixlib.load_classifier` (the committed classifier of the offline model, also the
        fallback when the run's model does not load; any other model trained once by the same
        recipe), ``info["accuracy"]`` its measured accuracy on the evaluation split; with a
        number, a brief fine-tune on that many examples (:meth:`train_classifier`)."""
        if self._settings.get("cls_max_train_examples") is not None:
            return self.train_classifier(task, self._model, **self._classifier_kw())
        bundle = load_classifier(task, self._model)
        ev = bundle.manifest.get("evaluation") or {}
        info = {"accuracy": ev.get("accuracy"), "accuracy_split": ev.get("split"),
                "accuracy_n": ev.get("n")}
        return bundle, info

    def base(self) -> tuple[Any, dict | None]:
        """The bare pre-trained encoder (:func:`cmixlib.load_model`)."""
        return load_model(self._model), None

    def blimp(self, bundle, limit: int | None) -> list[dict]:
        """BLiMP agreement test examples (:func:`blimp_sample`)."""
        return blimp_sample(bundle, limit)

    def sst2(self, bundle, limit: int | None) -> list[dict]:
        """SST-2 dev sentences (the first ``limit``)."""
        return data.load_sst2_inputs(bundle.tokenizer, split="dev", limit=limit)

    def sst2_test(self, bundle, limit: int | None) -> list[dict]:
        """SST-2 test sentences (the first ``limit``; unlabelled, ``label`` None): the split ALTI's
        analyses draw from, which need only the model's prediction."""
        return data.load_sst2_inputs(bundle.tokenizer, split="test", limit=limit)

    def sva(self, bundle, limit: int | None) -> list[dict]:
        """Subject-verb agreement sentences (Linzen et al.): ``limit`` or 500, seed 0."""
        return data.load_sva(bundle.tokenizer, limit=limit if limit is not None else 500, seed=0)

    def classification_inputs(self, bundle, task: str, limit: int | None) -> list[dict]:
        """The dev examples of a classification task (:func:`cmixlib.training.classification_data`;
        SST-2: :meth:`sst2`), target position 0 ([CLS]). MNLI with a classifier that holds
        ``heldout_indices`` (:func:`cmixlib.load_classifier`): its held-out dev-matched rows. A
        sentence pair (MNLI) keeps its ``token_type_ids`` where the tokenizer gives them (the
        classifier was trained with them, :mod:`cmixlib.training.classifiers`)."""
        if task == "sst2":
            return self.sst2(bundle, limit)
        if task == "mnli" and getattr(bundle, "heldout_indices", None) is not None:
            xs, ys = task_splits("mnli")["eval"]   # rows this classifier never saw
        else:
            xs, ys = training.classification_data(task, max_dev_examples=limit)["dev"]
        out = []
        for x, y in zip(xs, ys):
            enc = bundle.tokenizer(*x) if isinstance(x, (list, tuple)) else bundle.tokenizer(x)
            ex = {"input_ids": enc["input_ids"][:512], "label": int(y), "target_index": 0}
            if isinstance(x, (list, tuple)) and "token_type_ids" in enc:
                ex["token_type_ids"] = enc["token_type_ids"][:512]   # a pair's segment ids
            out.append(ex)
        return out[:limit] if limit is not None else out

    def model_b(self, bundle_a) -> tuple[Any, dict | None, str]:
        """``(bundle, info, how)``: the second SST-2 classifier of ALTI Figure 7.

        Setting ``model_b="auto"``: ``distilbert-base-uncased`` when model A really is
        ``bert-base-uncased`` and DistilBERT can be loaded (the paper's pair), else ``"student"``.
        ``"student"``: with the run's classifier settings at their defaults and model A the
        committed classifier of the offline model, the committed **distilled student**
        (:func:`cmixlib.load_student`: half of A's layers, initialised from every other layer of
        A, trained by distillation from A on SST-2 train, as DistilBERT was made from BERT).
        Otherwise (quick mode, tests, another model A) a pruned student: A's pre-trained encoder
        with only the layers ``keep_layers`` (default: every other layer counted from the top, so
        that the last layer, the one the classification head reads, is kept: 1, 3, 5 of 6), then
        fine-tuned briefly (:meth:`train_classifier`, no distillation) with A's ``cls_*``
        settings except ``b_cls_max_train_examples`` (default 6,000; None: A's) and
        ``b_cls_epochs`` (None: A's). Any
        other value of ``model_b`` is a model name, loaded without the offline fallback and
        fine-tuned like A.
        """
        choices = {"auto": self._model_b_auto, "student": self._model_b_student}
        spec = self._settings["model_b"]
        return choices[spec](bundle_a) if spec in choices else self._model_b_named(spec)

    def _b_kw(self) -> dict:
        """Brief fine-tuning arguments of a model B (A's, with the ``b_cls_*`` overrides)."""
        s, kw = self._settings, self._classifier_kw()
        for key in ("max_train_examples", "epochs"):
            if s.get(f"b_cls_{key}") is not None:
                kw[key] = s[f"b_cls_{key}"]
        return kw

    def _model_b_named(self, name: str) -> tuple[Any, dict | None, str]:
        if self._settings.get("cls_max_train_examples") is None:
            b = load_classifier("sst2", name, allow_fallback=False)
            return b, {"accuracy": (b.manifest.get("evaluation") or {}).get("accuracy")}, name
        b, info = self.train_classifier("sst2", name, allow_fallback=False, **self._b_kw())
        return b, info, name

    def _model_b_auto(self, bundle_a) -> tuple[Any, dict | None, str]:
        if getattr(bundle_a, "name", None) == "bert-base-uncased" and not getattr(bundle_a, "is_fallback", True):
            try:
                b, info, _ = self._model_b_named("distilbert-base-uncased")
                return b, info, "distilbert-base-uncased (the paper's second model)"
            except ModelLoadError:
                self.note("model_b=auto: distilbert-base-uncased could not be loaded; "
                                  "a DistilBERT-style student is used")
        return self._model_b_student(bundle_a)

    def _model_b_student(self, bundle_a) -> tuple[Any, dict | None, str]:
        s = self._settings
        manifest = getattr(bundle_a, "manifest", None) or {}
        committed = (s.get("cls_max_train_examples") is None and s.get("keep_layers") is None
                     and manifest.get("task") == "sst2"
                     and getattr(bundle_a, "variant", "") == "fine-tuned on sst2 (committed weights)")
        if committed:
            b = load_student("sst2")
            ev = b.manifest.get("evaluation") or {}
            kept = b.manifest.get("keep_layers")
            return b, {"accuracy": ev.get("accuracy")}, (
                f"the committed distilled student of model A (teacher layers {kept} kept, "
                "trained by distillation from A on SST-2 train; cmixlib.load_student)")
        keep = s["keep_layers"]
        n = num_layers(bundle_a.model)
        keep = list(keep) if keep is not None else list(range(n - 1, -1, -2))[::-1]
        b, info = self.train_classifier("sst2", self._model, keep_layers=keep, **self._b_kw())
        return b, info, (f"DistilBERT-style student of model A's pre-trained encoder: layers {list(keep)} "
                         "kept, then fine-tuned on SST-2 like model A (no distillation)")

    def hatexplain_rationales(self, bundle, limit: int | None) -> list[dict]:
        """HateXplain posts with a majority rationale of the run's ``split`` setting (default
        ``"test"``), the first ``limit`` (:func:`cmixlib.data.load_hatexplain_rationale_inputs`)."""
        return load_hatexplain_rationale_inputs(bundle.tokenizer, self._settings.get("split", "test"),
                                                limit)


# ----------------------------------------------------------------------------------------------
# What an experiment reads, declared
# ----------------------------------------------------------------------------------------------
def _fill(arg: str | None, sources: Sources, task: str | None) -> tuple:
    """``()`` or ``(arg,)`` with "{condition}" / "{task}" filled in from the run."""
    if arg is None:
        return ()
    return (arg.format(condition=sources.spec.settings.get("condition"), task=task),)


def _named(what: str, arg: str | None) -> str:
    """A declared input in words: e.g. MLM, pretrained MLM, MLM by condition."""
    if arg is None:
        return what
    return f"{what} by {arg.strip('{}')}" if arg.startswith("{") else f"{arg} {what}"


@dataclass(frozen=True)
class Model:
    """A model an experiment reads: :class:`Sources` method ``kind`` (``"mlm"``, ``"classifier"``,
    ``"base"``) called with ``arg``, where ``"{condition}"`` stands for the run's ``condition``
    setting and ``"{task}"`` for the task being run."""

    kind: str
    arg: str | None = None

    def load(self, sources: Sources, task: str | None = None) -> tuple[Any, dict | None]:
        return getattr(sources, self.kind)(*_fill(self.arg, sources, task))

    def __str__(self) -> str:
        what = {"mlm": "MLM", "classifier": "classifier", "base": "base model"}.get(self.kind, self.kind)
        return _named(what, self.arg)


@dataclass(frozen=True)
class ModelByCondition:
    """The model named by the run's ``condition`` setting, one :class:`Model` per condition."""

    choices: Mapping[str, Model]

    def load(self, sources: Sources, task: str | None = None) -> tuple[Any, dict | None]:
        condition = sources.spec.settings["condition"]
        if condition not in self.choices:
            raise ValueError(f"condition must be one of {list(self.choices)}, not {condition!r}")
        return self.choices[condition].load(sources, task)

    def __str__(self) -> str:
        return " / ".join(f"{model} if {c}" for c, model in self.choices.items())


def whole_split(spec: RunSpec) -> None:
    """A :class:`Data` limit: every example (the experiment applies the run's limit itself)."""
    return None


@dataclass(frozen=True)
class Data:
    """Examples an experiment reads: :class:`Sources` method ``kind`` (``"blimp"``, ``"sst2"``,
    ``"sst2_test"``, ``"sva"``, ``"classification_inputs"``) called with the model's bundle, ``arg`` (as for
    :class:`Model`) and ``limit(spec)`` (default: the run's ``limit``)."""

    kind: str
    arg: str | None = None
    limit: Callable[[RunSpec], int | None] | None = None

    def load(self, sources: Sources, bundle, task: str | None = None) -> list[dict]:
        limit = self.limit(sources.spec) if self.limit is not None else sources.spec.limit
        return getattr(sources, self.kind)(bundle, *_fill(self.arg, sources, task), limit)

    def __str__(self) -> str:
        what = {"blimp": "BLiMP agreement", "sst2": "SST-2 dev", "sst2_test": "SST-2 test", "sva": "SVA",
                "classification_inputs": "dev split"}.get(self.kind, self.kind)
        return _named(what, self.arg)


@dataclass(frozen=True)
class Inputs:
    """The model an experiment reads, its examples (optional) and anything else, in words."""

    model: Model | ModelByCondition
    data: Data | None = None
    also: str = ""

    def __str__(self) -> str:
        return ", ".join(str(x) for x in (self.model, self.data, self.also or None) if x is not None)


#: The classifier fine-tuned on SST-2 (ALTI Figures 6, 7 and Table 2, GlobEnc Figure 4).
SST2_CLASSIFIER = Model("classifier", "sst2")
