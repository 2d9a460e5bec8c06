"""The experiment runner: the run context, the run and the files a run writes.

:func:`run_experiment` looks an experiment up in :data:`~cmixlib.experiments.declaration.REGISTRY`
(:mod:`cmixlib.experiments.declaration`), merges its default settings with the caller's, and
either loads the result from the cache (:mod:`cmixlib.experiments.result_cache`: where, and the
code version and key that identify a result) or calls the experiment's ``compute(ctx)`` with a
:class:`Context`, then writes every frame as CSV next to a ``meta.json`` sidecar (and the papers'
numbers as ``paper.csv``) and returns a :class:`RunResult`.
"""
from __future__ import annotations

import json
import numbers
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
from tqdm.auto import tqdm

from cmixlib.models.devices import default_device, model_device, resolve_device, use_device
from cmixlib.models.loading import default_model_name
from cmixlib.validation import InputError, check_bool, check_choice, check_positive_int
from cmixlib.validation import describe as show
from cmixlib import __version__
from cmixlib.cache import jsonable
from cmixlib.experiments.common import describe
from cmixlib.experiments.declaration import REGISTRY, Experiment
from cmixlib.experiments.result_cache import cache_key, code_version, load_cached, results_root
from cmixlib.experiments.sources import Inputs, Sources
from cmixlib.experiments.spec import RunSpec

__all__ = ["Context", "RunResult", "run_experiment", "list_experiments"]


@dataclass
class Context:
    """What an experiment's ``compute`` receives: the run's model name, ``limit``, merged
    ``settings`` (read-only) and progress flag, frozen together as :attr:`spec`
    (:class:`~cmixlib.experiments.spec.RunSpec`); ``sources`` (bound to that spec) for its models
    and examples, as declared in ``inputs`` (:meth:`load_inputs`); ``notes`` and ``info``, which
    go to ``meta.json``. A run's identity does not change once it starts: to run other settings,
    make another Context."""

    experiment: str
    model: str
    limit: int | None
    settings: Mapping[str, Any]
    progress: bool = True
    notes: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)   # model_description, data_size, ... (meta.json)
    sources: Sources | None = None
    inputs: Inputs | Mapping[str, Inputs] | None = None
    spec: RunSpec = field(init=False)
    _devices: set = field(default_factory=set, init=False, repr=False)   # meta.json "device"

    def __post_init__(self):
        self.spec = RunSpec(self.experiment, self.model, self.limit, self.settings, self.progress)
        self.settings = self.spec.settings
        self.sources = (self.sources if self.sources is not None else Sources()).bind(self.spec, self.note)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("experiment", "model", "limit", "settings", "progress") and "spec" in self.__dict__ \
                and value is not getattr(self.spec, name):
            raise AttributeError(f"Context.{name} is fixed for the run (its RunSpec); make a new "
                                 "Context to run other settings.")
        super().__setattr__(name, value)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def describe_models(self, models: Sequence[tuple[str | None, Any, dict | None]], *,
                        append: bool = False) -> None:
        """Record which models the run used, for ``meta.json``: ``models`` is ``(key, bundle,
        info)`` per model (``key`` its task or role, None for a run of one model). Writes the
        display text ``meta["model"]`` (``"description"``, or ``"key: description | ..."``)
        and, beside it, the structured identities ``meta["model_identity"]``
        (:meth:`cmixlib.ModelBundle.identity`: one dict for one model, else a list with
        ``"key"`` in the text's order), so that no reader parses the text. A bundle without
        ``identity()`` (a stand-in of a test) records the text only. An experiment that writes
        ``info["model_description"]`` by hand stores no identity (:func:`_compute` keeps the
        identities only while they describe the text)."""
        parts = [(k, describe(b, i), b.identity() if hasattr(b, "identity") else None)
                 for k, b, i in models]
        before = self.info.get("model_description") if append else None
        text = " | ".join(d if k is None else f"{k}: {d}" for k, d, _ in parts)
        text = f"{before} | {text}" if before else text
        ids = (list(self.info.get("_identities", [])) if before else []) + \
            [None if ident is None else {**ident, "key": k} for k, _, ident in parts]
        self.info["model_description"] = text
        self.info["_identities"] = ids
        self.info["_identities_for"] = text

    def tqdm(self, iterable, **kw):
        return tqdm(iterable, disable=not self.progress, leave=False, **kw)

    def load_inputs(self, task: str | None = None) -> tuple[Any, dict | None, list[dict] | None]:
        """``(bundle, info, examples)`` of the declared :attr:`inputs` (those of ``task`` for a
        per-task experiment), loaded through :attr:`sources`. Records the model's description
        (per task: ``"task: description"``, joined by ``" | "``) and the number of examples (per
        task: a dict) in :attr:`info` for ``meta.json``."""
        spec = self.inputs[task] if isinstance(self.inputs, Mapping) else self.inputs
        if spec is None:
            raise RuntimeError(f"Experiment {self.experiment!r} declares no inputs")
        bundle, info = spec.model.load(self.sources, task)
        self._devices.add(str(model_device(bundle.model)))
        if task is None:
            self.describe_models([(None, bundle, info)])
        else:
            self.describe_models([(task, bundle, info)], append=True)
        examples = spec.data.load(self.sources, bundle, task) if spec.data is not None else None
        if examples is not None:
            if task is None:
                self.info["data_size"] = len(examples)
            else:
                self.info.setdefault("data_size", {})[task] = len(examples)
        return bundle, info, examples


@dataclass
class RunResult:
    frames: dict[str, pd.DataFrame]
    meta: dict
    directory: Path
    from_cache: bool
    paper: pd.DataFrame | None = None
    files: list[Path] = field(default_factory=list)

    @property
    def result(self) -> pd.DataFrame:
        return self.frames["result"]

    def summary(self) -> str | None:
        """A compact text view of the result, if the experiment defines one."""
        exp = REGISTRY.get(self.meta["experiment"])
        return exp.summary(self.frames) if exp is not None and exp.summary is not None else None

    def comparison(self) -> pd.DataFrame | None:
        exp = REGISTRY.get(self.meta["experiment"])
        if exp is None or exp.compare is None or self.paper is None:
            return None
        comp = exp.compare(self.frames, self.paper)
        if comp is None or "paper_model" not in comp.columns:
            return comp
        # one paper model per row: ours if the paper has it, else the papers' main model
        models = set(comp["paper_model"].dropna())
        if len(models) > 1:
            want = self.meta.get("model_requested")
            want = want if want in models else "bert-base-uncased"
            comp = comp[comp["paper_model"].isna() | (comp["paper_model"] == want)]
        if "n" in comp.columns:
            comp = comp.assign(n=comp["n"].astype("Int64"))
        return comp.reset_index(drop=True)


def _setting_kind(value: Any, default: Any) -> str | None:
    """What a setting with this ``default`` must be, if ``value`` is not that (else None). None is
    always accepted; a string, mapping or None default takes any value."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    for kind, ok, what in ((bool, isinstance(value, bool), "True or False"),
                           (numbers.Integral, number and isinstance(value, numbers.Integral), "an integer"),
                           (numbers.Real, number, "a number"),
                           ((list, tuple), isinstance(value, (list, tuple)), "a list")):
        if isinstance(default, kind):
            return None if ok or value is None else what
    return None


def _check_settings(exp: Experiment, settings: Mapping[str, Any] | None) -> dict:
    """``settings`` of a run of ``exp``: a mapping of its own settings, each of its default's kind."""
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings must be a mapping (setting -> value) or None; got {show(settings)}.")
    unknown = sorted((k for k in settings if k not in exp.defaults), key=str)
    if unknown:
        raise InputError(f"Experiment {exp.name!r} has no setting(s) {unknown}; settings: "
                         f"{sorted(exp.defaults)}")
    for key, value in settings.items():
        kind = _setting_kind(value, exp.defaults[key])
        if kind is not None:
            raise InputError(f"Setting {key!r} of experiment {exp.name!r} must be {kind} (default "
                             f"{exp.defaults[key]!r}); got {show(value)}.")
    return dict(settings)


def _resolve_model(model: str | None) -> str:
    if model:
        return model
    return default_model_name()


def _identities(info: dict) -> dict | list[dict] | None:
    """The structured identities :meth:`Context.describe_models` recorded (popped from
    ``info``), if they still describe ``info["model_description"]`` and every model had one:
    one dict (without ``key``) for a run of one model, else the list. None otherwise (the
    book then reads the display text, :mod:`cmixlib.book.identity`)."""
    ids, text = info.pop("_identities", None), info.pop("_identities_for", None)
    desc = info.pop("model_description", None)
    if not ids or text != desc or any(i is None for i in ids):
        return None
    if len(ids) == 1 and ids[0]["key"] is None:
        return {k: v for k, v in ids[0].items() if k != "key"}
    return ids


def _compute(exp: Experiment, ctx: Context, key: str, version: str, directory: Path) -> RunResult:
    """Run ``exp`` in ``ctx``, write its files to ``directory`` and return the result."""
    t0 = time.perf_counter()
    frames = dict(exp.compute(ctx))
    wall = time.perf_counter() - t0
    if "result" not in frames:
        raise RuntimeError(f"Experiment {exp.name!r} returned no 'result' frame")
    paper = exp.paper_numbers() if exp.paper_numbers is not None else None
    meta = {
        "experiment": exp.name, "title": exp.title, "paper": exp.paper,
        "model_requested": ctx.model,
        "model": ctx.info.get("model_description", ctx.model),
        "model_identity": _identities(ctx.info),
        # where the models ran; not in the cache key (results agree across devices up to rounding)
        "device": ", ".join(sorted(ctx._devices)) or str(default_device()),
        "data_size": ctx.info.pop("data_size", None), "limit": ctx.limit, "settings": ctx.settings,
        "wall_time_s": round(wall, 3), "code_version": version, "cmixlib_version": __version__,
        "cache_key": key, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "frames": list(frames), "notes": list(ctx.notes), "info": ctx.info,
        "paper_numbers": (sorted(set(paper["source"])) if paper is not None and len(paper) else []),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for fname, df in frames.items():
        df.to_csv(directory / f"{fname}.csv", index=False)
    if paper is not None:
        paper.to_csv(directory / "paper.csv", index=False)
    (directory / "meta.json").write_text(json.dumps(jsonable(meta), indent=2))
    return RunResult(frames=frames, meta=json.loads(json.dumps(jsonable(meta))), directory=directory,
                     from_cache=False, paper=paper, files=sorted(directory.iterdir()))


def run_experiment(name: str, model: str | None = None, limit: int | None = None,
                   settings: Mapping[str, Any] | None = None, *, out: str | Path | None = None,
                   use_cache: bool = True, progress: bool = True,
                   sources: Sources | None = None, device: str | None = None) -> RunResult:
    """Run (or load from the cache) experiment ``name`` and write its files.

    ``settings`` override the experiment's defaults (unknown keys are an error). ``out``: also copy
    the files to this folder as ``<name>.<frame>.csv``, ``<name>.meta.json``, ``<name>.paper.csv``.

    ``sources``: where the models and examples come from (default :class:`Sources`: the real
    models, trained and cached by :mod:`cmixlib.training`, and the real data). Pass a subclass
    that overrides some of its methods to run an experiment on your own models or data (tests use
    it for tiny random models). The cache knows the model only by ``model``: give such a run a
    model name of its own, or ``use_cache=False``.

    ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``; default: ``$CMIX_DEVICE``, else CUDA when
    available) is where the models this run loads go (:func:`cmixlib.models.devices.use_device`); it is
    recorded as ``meta["device"]`` but is not part of the cache key: a result computed on one
    device is reused on another (they agree up to floating-point rounding; models trained for
    a run can differ more, and their cache, too, is shared across devices). A device that is not
    available is an error even when the result is cached.

    Checked before any work (:class:`~cmixlib.InputError`, or TypeError for a wrong type): ``name``
    in :data:`REGISTRY`; ``model`` None or a string; ``limit`` None or an integer >= 1; each
    setting None or of its default's kind (bool, integer, number, list; string settings take any
    value); ``use_cache``, ``progress`` bools; ``sources`` None or a :class:`Sources`; ``device``
    (or ``$CMIX_DEVICE``) one :func:`cmixlib.models.devices.resolve_device` accepts.

    Examples
    --------
    >>> import cmixlib
    >>> res = cmixlib.run_experiment("globenc-fig5-ln-outliers")   # doctest: +SKIP
    >>> res.result.head()                                          # doctest: +SKIP
    >>> res.meta["model"], res.from_cache                          # doctest: +SKIP
    >>> cmixlib.run_experiment("no-such-experiment")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cmixlib.validation.InputError: Unknown experiment 'no-such-experiment': name must be one of ...
    """
    exp = REGISTRY[check_choice(name, sorted(REGISTRY), "name", what="experiment")]
    if model is not None and not isinstance(model, str):
        raise TypeError(f"model must be a model name or path (str) or None; got {show(model)}.")
    limit = check_positive_int(limit, "limit", allow_none=True)
    merged = {**exp.defaults, **_check_settings(exp, settings)}
    if out is not None and not isinstance(out, (str, Path)):
        raise TypeError(f"out must be a folder (str or Path) or None; got {show(out)}.")
    use_cache, progress = check_bool(use_cache, "use_cache"), check_bool(progress, "progress")
    if sources is not None and not isinstance(sources, Sources):
        raise TypeError(f"sources must be a cmixlib.experiments.Sources (or None); got {show(sources)}.")
    if device is not None:                       # a bad or unavailable device (the option or
        resolve_device(device)                   # $CMIX_DEVICE) fails here, even on a cache hit
    else:
        default_device()
    model_name = _resolve_model(model)
    version = code_version(name)
    key = cache_key(name, model_name, limit, merged, version)
    directory = results_root() / name / key
    cached = load_cached(directory) if use_cache else None
    if cached is not None:
        frames, meta, paper = cached
        res = RunResult(frames=frames, meta=meta, directory=directory, from_cache=True, paper=paper,
                        files=sorted(directory.iterdir()))
    else:
        ctx = Context(experiment=name, model=model_name, limit=limit, settings=merged,
                      progress=progress, sources=sources, inputs=exp.inputs)
        with use_device(device):
            res = _compute(exp, ctx, key, version, directory)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        copied = []
        for f in sorted(directory.iterdir()):
            dest = out / f"{name}.{f.name}"
            shutil.copyfile(f, dest)
            copied.append(dest)
        res.files = copied
    return res


def list_experiments() -> pd.DataFrame:
    """Name, paper, title, default settings and declared inputs of every registered experiment.

    Examples
    --------
    >>> import cmixlib
    >>> table = cmixlib.list_experiments()
    >>> list(table.columns[:3])
    ['name', 'paper', 'title']
    >>> "vz-cue-alignment" in set(table["name"])
    True
    """
    return pd.DataFrame([{"name": e.name, "paper": e.paper, "title": e.title,
                          "settings": json.dumps(jsonable(e.defaults)), "needs": e.needs}
                         for e in REGISTRY.values()])
