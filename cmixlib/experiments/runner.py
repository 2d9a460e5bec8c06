"""The experiment runner: the declaration of an experiment (:class:`Experiment`), the registry,
the run context, the result cache and the files a run writes.

:func:`run_experiment` looks an experiment up in :data:`REGISTRY`, merges its default settings
with the caller's, and either loads the result from the cache or calls the experiment's
``compute(ctx)`` with a :class:`Context`, then writes every frame as CSV next to a ``meta.json``
sidecar (and the papers' numbers as ``paper.csv``) and returns a :class:`RunResult`.

**Cache.** ``<root>/results/<experiment>/<key>/`` where ``<root>`` is ``$CMIX_CACHE`` or
``<repo>/.cmix_cache``. ``key`` hashes (experiment, model name, limit, settings, code version);
the code version (:func:`code_version`) hashes the source of every module of cmixlib the
experiment imports (and the committed weights' manifests), so a change to that code, a different
model or any changed setting recomputes, and an edit elsewhere does not.
"""
from __future__ import annotations

import hashlib
import json
import numbers
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from cmixlib.models.devices import default_device, model_device, resolve_device, use_device
from cmixlib.validation import InputError, check_bool, check_choice, check_positive_int
from cmixlib.validation import describe as show
from cmixlib.cache import (PACKAGE_DIR, cache_root, code_text, jsonable, result_closure,
                           source_files, stable_hash)
from cmixlib.experiments.common import describe
from cmixlib.experiments.sources import Inputs, Sources
from cmixlib.experiments.spec import RunSpec

__all__ = ["Experiment", "Context", "RunResult", "REGISTRY", "register", "run_experiment",
           "list_experiments", "code_version", "code_files", "PRESENTATION_MODULES", "presentation_files",
           "results_root", "cache_key"]

Frames = Mapping[str, pd.DataFrame]


@dataclass
class Experiment:
    """One experiment, declared as data.

    ``compute(ctx) -> {frame_name: DataFrame}`` does the work (the frame ``"result"`` is
    required; its docstring is the exact recipe, kept as ``description``). ``defaults``: every
    setting and its default (a run may override only these). ``inputs``: the model and examples
    it reads (:class:`cmixlib.experiments.sources.Inputs`, or one per task for experiments run on
    several tasks), loaded through the run's :class:`~cmixlib.experiments.sources.Sources` by
    :meth:`Context.load_inputs`. ``paper_numbers()``: the published numbers it is compared with
    (quotes from :mod:`cmixlib.data.paper_numbers`); ``compare(frames, paper)``: ours beside them;
    ``summary(frames)``: a compact text view.
    """

    name: str
    title: str
    paper: str
    compute: Callable[["Context"], Frames]
    defaults: dict = field(default_factory=dict)
    inputs: Inputs | Mapping[str, Inputs] | None = None
    paper_numbers: Callable[[], pd.DataFrame] | None = None
    compare: Callable[[Frames, pd.DataFrame], pd.DataFrame] | None = None
    summary: Callable[[Frames], str] | None = None
    description: str = ""

    def __post_init__(self):
        self.defaults = dict(self.defaults)
        self.description = self.description or (self.compute.__doc__ or "").strip()

    @property
    def needs(self) -> str:
        """The declared inputs, in words."""
        if isinstance(self.inputs, Mapping):
            return "; ".join(f"{task}: {inp}" for task, inp in self.inputs.items())
        return str(self.inputs) if self.inputs is not None else ""


#: Every registered experiment by name, in registration order (``cmix list``).
REGISTRY: dict[str, Experiment] = {}


def register(experiment: Experiment | str, **declaration):
    """Add an :class:`Experiment` to :data:`REGISTRY` (and return it).

    Also a decorator, ``@register(name, title=..., paper=..., defaults=..., ...)`` over
    ``compute(ctx)``, for an experiment declared next to its function (e.g. in a notebook)."""
    if isinstance(experiment, Experiment):
        REGISTRY[experiment.name] = experiment
        return experiment

    def deco(compute):
        register(Experiment(name=experiment, compute=compute, **declaration))
        return compute
    return deco


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

    def tqdm(self, iterable, **kw):
        from tqdm.auto import tqdm

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
        desc = describe(bundle, info)
        if task is None:
            self.info["model_description"] = desc
        else:
            before = self.info.get("model_description")
            self.info["model_description"] = f"{before} | {task}: {desc}" if before else f"{task}: {desc}"
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


def results_root() -> Path:
    """``<cache root>/results`` (see :func:`cmixlib.cache.cache_root`)."""
    return cache_root() / "results"


#: Modules (or sub-packages) of cmixlib that only present or check results: notebook setup, the
#: command line, coursework checkers, plots. No other module imports them (a test checks this), so
#: they cannot change a result, and :func:`code_version` leaves them out: editing a plot does not
#: recompute the book.
PRESENTATION_MODULES = frozenset({"book", "plotting", "cli"})

def presentation_files() -> frozenset[str]:
    """The ``.py`` files of :data:`PRESENTATION_MODULES` (all files of a sub-package), as paths
    relative to the package (as :func:`cmixlib.cache.source_files` takes them)."""
    return frozenset(f.relative_to(PACKAGE_DIR).as_posix()
                     for f in source_files(*sorted(PRESENTATION_MODULES), missing_ok=True))


def code_files(experiment: str | None = None) -> list[Path]:
    """The ``.py`` files of cmixlib a result of ``experiment`` depends on: those its module
    imports, transitively (:func:`cmixlib.cache.result_closure`; an experiment declared outside
    cmixlib, e.g. in a notebook, and ``None``: every file), less :data:`PRESENTATION_MODULES`."""
    exp = REGISTRY.get(experiment) if experiment is not None else None
    module = getattr(exp.compute, "__module__", "") if exp is not None else ""
    if module.startswith(f"{PACKAGE_DIR.name}."):
        files = result_closure([module])
    else:
        files = source_files()
    skip = presentation_files()
    return [f for f in files if f.relative_to(PACKAGE_DIR).as_posix() not in skip]


def code_version(experiment: str | None = None) -> str:
    """Hash (12 hex) of the code of :func:`code_files` (docstrings and comments left out,
    :func:`cmixlib.cache.code_text`) and of the committed weights' manifests (they hold the
    weights' checksums: ``cmixlib/assets/*/manifest.json``, ``assets/classifiers/*/``): editing a
    module re-runs only the experiments that import it."""
    h = hashlib.sha256()
    for f in sorted(code_files(experiment)):
        h.update(f.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + code_text(f).encode() + b"\0")
    for manifest in sorted((PACKAGE_DIR / "assets").rglob("manifest.json")):
        h.update(manifest.relative_to(PACKAGE_DIR).as_posix().encode() + b"\0" + manifest.read_bytes())
    return h.hexdigest()[:12]


def cache_key(experiment: str, model: str, limit: int | None, settings: Mapping, version: str) -> str:
    """The result folder's name: :func:`cmixlib.cache.stable_hash` of what produced the result."""
    return stable_hash({"experiment": experiment, "model": model, "limit": limit,
                        "settings": settings, "code_version": version})


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
    from cmixlib.models.loading import default_model_name

    return default_model_name()


def _load_cached(directory: Path) -> tuple[dict[str, pd.DataFrame], dict, pd.DataFrame | None] | None:
    meta_path = directory / "meta.json"
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        frames = {name: pd.read_csv(directory / f"{name}.csv") for name in meta["frames"]}
        paper = pd.read_csv(directory / "paper.csv") if (directory / "paper.csv").exists() else None
    except (OSError, ValueError, KeyError):
        return None
    return frames, meta, paper


def _compute(exp: Experiment, ctx: Context, key: str, version: str, directory: Path) -> RunResult:
    """Run ``exp`` in ``ctx``, write its files to ``directory`` and return the result."""
    from cmixlib import __version__

    t0 = time.perf_counter()
    frames = dict(exp.compute(ctx))
    wall = time.perf_counter() - t0
    if "result" not in frames:
        raise RuntimeError(f"Experiment {exp.name!r} returned no 'result' frame")
    paper = exp.paper_numbers() if exp.paper_numbers is not None else None
    meta = {
        "experiment": exp.name, "title": exp.title, "paper": exp.paper,
        "model_requested": ctx.model,
        "model": ctx.info.pop("model_description", ctx.model),
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
    cached = _load_cached(directory) if use_cache else None
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
