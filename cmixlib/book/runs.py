"""The runs behind the book's evaluation chapters: their sizes and settings, in one place.

Chapters 9-13 and the appendix do not choose data sizes or settings themselves: each asks for a
run by name (:data:`BOOK_RUNS`) and :func:`run` calls :func:`cmixlib.experiments.run_experiment`
with the size and settings written here. Two chapters that ask for the same run therefore get the
same result from the result cache, and a reader changes a size in one place.

Full mode uses the papers' sizes: the whole BLiMP agreement test half for Value Zeroing's
evaluations (the paper's *Test set*), 500 sentences for ALTI's Table 2 (the paper: "500 random
samples"). Quick mode (``CMIX_QUICK=1``, :func:`cmixlib.book.notebook.quick_mode`) runs 2 examples with
barely trained models: its numbers only show that the code runs.

Keeping the result cache across Colab runtimes: :mod:`cmixlib.book.drive`.

Example::

    from cmixlib.book.runs import run, describe_run
    res = run("cue-alignment", "finetuned")
    describe_run(res)
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import torch

from cmixlib.book import costs
from cmixlib.book.costs import fit_throughput, predict, run_flops
from cmixlib.book.notebook import QUICK_ENV_VAR, model_line, quick_mode
from cmixlib.experiments import (REGISTRY, cache_key, code_version, load_condition_mlm,
                                 results_root, run_experiment)
from cmixlib.models.loading import default_model_name
from cmixlib.training import mlm_metrics

__all__ = ["BookRun", "BOOK_RUNS", "CONDITIONS", "CONDITION_LABELS", "WARM_STEPS",
           "run_arguments", "run", "book_calls", "mlm_condition_metrics", "prewarm",
           "prewarm_chains", "describe_run", "is_cached", "announce", "estimate", "cost_fit"]

#: The two model conditions of the Value Zeroing evaluations, and how the text names them.
CONDITIONS = ("pretrained", "finetuned")
CONDITION_LABELS = {"pretrained": "pre-trained", "finetuned": "fine-tuned"}

#: Quick mode only: a 3-step "fine-tuned" MLM, 2 IG steps, a barely trained classifier (its
#: accuracy measured on 64 dev rows). Full mode reads the classifiers of
#: :func:`cmixlib.load_classifier` (committed for the offline model; the experiments' defaults).
_QUICK_FT = {"ft_epochs": 1, "ft_max_train_examples": 192}
_QUICK_IG = {"ig_steps": 2}
_QUICK_CLS = {"cls_epochs": 1, "cls_max_train_examples": 200, "cls_max_dev_examples": 64}


@dataclass(frozen=True)
class BookRun:
    """One run of the book: which experiment, on how much data, with which settings.

    ``full_limit`` ``None`` means the experiment's whole data (see each experiment's docstring);
    ``conditioned`` runs take a model condition (pre-trained or fine-tuned MLM). ``group``: the
    runs that read the same models ("mlm": the masked LMs of the Value Zeroing evaluations;
    "classifier": the sentence classifiers); in quick mode, where those models are briefly
    trained in the build, a group runs one after another in :func:`prewarm`. ``chain``: in full
    mode, the runs with the same chain name run in one process, one after another (a run that
    reads a model another run trains in the build; the fine-tuned condition's runs share
    "mlm-finetuned"). ``borrows``: ``(book run, condition)`` pairs whose models this run reads;
    their settings in the current mode are passed as the setting named after each run's
    experiment (so they are part of this run's cache key). ``cost``: seconds
    of one full-mode run on one core (per condition; measured, see the README), used only to
    order :func:`prewarm`'s queue, longest first."""

    experiment: str
    full_limit: int | None
    quick_limit: int | None
    settings: Mapping[str, Any] = field(default_factory=dict)
    quick_settings: Mapping[str, Any] = field(default_factory=dict)
    conditioned: bool = False
    group: str = "mlm"
    cost: float = 60.0
    chain: str | None = None
    borrows: tuple[tuple[str, str | None], ...] = ()
    warms: tuple[str, ...] = ()


#: Every run the book asks for, by name, with its sizes in full and quick mode.
BOOK_RUNS: dict[str, BookRun] = {
    # the whole BLiMP agreement test half, as the paper
    # then the masked-LM metrics of its model, which chapters 8 and 9 print
    "cue-alignment": BookRun(
        "vz-cue-alignment", None, 2, cost=310, quick_settings=_QUICK_IG, conditioned=True,
        warms=("mlm-metrics",)),
    # the whole BLiMP agreement test half
    "distance-ablation": BookRun(
        "vz-distance-ablation", None, 2, cost=57, settings={"condition": "pretrained"}),
    # the whole test half, for the probe and for the alignment; the probe at 4 seeds (each
    # about 2 s of the cost)
    "mdl-probing": BookRun(
        "vz-mdl-probing", None, 2, cost=29, quick_settings=_QUICK_IG, conditioned=True),
    # the whole BLiMP agreement test half, as the paper
    "faithfulness": BookRun(
        "vz-faithfulness", None, 2, cost=255, quick_settings=_QUICK_IG, conditioned=True),
    # chapter 11's depth analysis (beyond the paper): 200 test pairs, a seeded sample of all five
    # subsets (blimp_sample), to stay within 3 minutes of one core for both conditions
    "rollout-depth": BookRun(
        "vz-rollout-depth", 200, 2, cost=27, conditioned=True),
    # the first 500 SST-2 test sentences (ALTI's split: its analyses need only the prediction;
    # the paper's count, "500 random samples"; the authors' code takes the first 1,000) and 500
    # random SVA sentences, as the paper
    "alti-table2": BookRun(
        "alti-table2", 500, 2, cost=168, quick_settings=_QUICK_CLS, group="classifier"),
    # the first 500 SST-2 test sentences
    "alti-fig6": BookRun(
        "alti-fig6-special-ranks", 500, 2, cost=20, quick_settings=_QUICK_CLS, group="classifier"),
    # the first 540 SST-2 test sentences, so that about 500 on which the two models predict the
    # same class are compared (model B: the distilled 3-layer student). IG with 32 Gauss-Legendre
    # steps, a third of the authors' 100 (IG is 9/10 of this run's time); the first 25 compared
    # sentences are also run at 100 steps and the agreement is reported (frame "ig_check")
    "alti-fig7": BookRun(
        "alti-fig7-consistency", 540, 3, cost=449, settings={"ig_steps": 32, "ig_check": 25},
        quick_settings={**_QUICK_CLS, "b_cls_max_train_examples": 200, "ig_steps": 4,
                        "ig_check": 1, "ig_check_steps": 8}, group="classifier"),
    # the first 500 SST-2 test sentences, as the code
    "alti-fig3": BookRun(
        "alti-fig3-anisotropy", 500, 2, cost=12, quick_settings=_QUICK_CLS, group="classifier"),
    # the validation splits of the three tasks, as the paper: SST-2 dev (872), MNLI the 4,000
    # dev-matched rows the classifier never saw (the paper: all 9,815), HateXplain val (1,922);
    # both rollouts from one pass (frame "variants")
    "globenc-correlations": BookRun(
        "globenc-correlations", None, 2, cost=401, settings={"tasks": ["sst2", "mnli", "hatexplain"]},
        quick_settings={**_QUICK_CLS, "tasks": ["sst2", "mnli", "hatexplain"]},
        group="classifier"),
    # the first 256 SST-2 dev sentences, no token cap, as the paper (closed-form Jacobians)
    "globenc-fig4": BookRun(
        "globenc-fig4-hta", 256, 1, cost=494, quick_settings={**_QUICK_CLS, "max_tokens": 8},
        group="classifier"),
    # the LayerNorm gains of the pre-trained model (weights only: no data)
    "globenc-fig5": BookRun("globenc-fig5-ln-outliers", None, None, cost=1, group="classifier"),
    # every HateXplain test post with a majority rationale (1,106), the committed classifier
    "plausibility": BookRun(
        "hatexplain-plausibility", None, 2, cost=373, quick_settings={**_QUICK_CLS, **_QUICK_IG},
        group="classifier"),
    # chapter 16: SmolLM2 (offline decoder) on chapter 9's BLiMP test half, at most 80 pairs per
    # paradigm (seeded sample), sized so that the chapter, run included, fits 5 minutes of one
    # core (cost: CPU seconds measured). Its models are only loaded, never trained: any group
    "decoder-blimp": BookRun("decoder-blimp", 80, 2, cost=153, group="classifier"),
    # the papers' example sentences, scored by their claims (the status page): the models of
    # "faithfulness" (fine-tuned MLM: same chain, see prewarm_chains) and "alti-table2"; a fixed
    # set of sentences, the same in quick mode
    "paper-examples": BookRun("paper-example-claims", None, None, cost=6,
                               chain="mlm-finetuned",
                               borrows=(("faithfulness", "finetuned"), ("alti-table2", None),
                                        ("alti-fig7", None))),
    # ALTI Figures 8-10: the first 200 SST-2 test sentences (the figures show one sentence; the
    # claim is about the methods, so it is measured on many)
    "alti-figs8-10": BookRun("alti-figs8-10-homogeneity", 200, 2, cost=4,
                             quick_settings=_QUICK_CLS, group="classifier"),
}


def run_arguments(name: str, condition: str | None = None,
                  **extra: Any) -> tuple[str, int | None, dict[str, Any]]:
    """``(experiment, limit, settings)`` of book run ``name`` in the current mode.

    ``condition`` ("pretrained"/"finetuned") is required by conditioned runs and refused by the
    others; ``extra`` settings are added last (e.g. ``methods=[...]``, ``exclude="target"``)."""
    if name not in BOOK_RUNS:
        raise KeyError(f"Unknown book run {name!r}; known: {', '.join(BOOK_RUNS)}")
    spec = BOOK_RUNS[name]
    quick = quick_mode()
    settings: dict[str, Any] = dict(spec.quick_settings if quick else spec.settings)
    if spec.conditioned:
        if condition not in CONDITIONS:
            raise ValueError(f"Book run {name!r} needs condition= one of {CONDITIONS}, "
                             f"not {condition!r}.")
        settings["condition"] = condition
        if quick and condition == "finetuned":
            settings.update(_QUICK_FT)
    elif condition is not None:
        raise ValueError(f"Book run {name!r} takes no condition (got {condition!r}).")
    for other, cond in spec.borrows:
        exp, _, borrowed = run_arguments(other, cond)
        settings[exp] = borrowed
    settings.update(extra)
    return spec.experiment, spec.quick_limit if quick else spec.full_limit, settings


def run(name: str, condition: str | None = None, *, progress: bool = False, **extra: Any):
    """Run (or load from the result cache) book run ``name``: a
    :class:`cmixlib.experiments.RunResult` (see :func:`run_arguments`)."""
    experiment, limit, settings = run_arguments(name, condition, **extra)
    if not is_cached(name, condition, **extra):
        announce(name, condition)
    return run_experiment(experiment, limit=limit, settings=settings, progress=progress)


def is_cached(name: str, condition: str | None = None, **extra: Any) -> bool:
    """Whether book run ``name`` is already in the result cache (for the default model)."""
    experiment, limit, settings = run_arguments(name, condition, **extra)
    merged = {**REGISTRY[experiment].defaults, **settings}
    key = cache_key(experiment, default_model_name(), limit, merged, code_version(experiment))
    return (results_root() / experiment / key / "meta.json").exists()


def _arguments(name: str, condition: str | None, quick: bool | None):
    """:func:`run_arguments` in quick (True) or full (False) mode, or the current one (None)."""
    if quick is None:
        return run_arguments(name, condition)
    old = os.environ.get(QUICK_ENV_VAR)
    os.environ[QUICK_ENV_VAR] = "1" if quick else "0"
    try:
        return run_arguments(name, condition)
    finally:
        if old is None:
            os.environ.pop(QUICK_ENV_VAR, None)
        else:
            os.environ[QUICK_ENV_VAR] = old


_FIT: dict[str, float] = {}


def cost_fit() -> dict[str, float]:
    """The throughputs and overhead of :func:`cmixlib.book.costs.fit_throughput`, fitted to every
    book run's measured :attr:`BookRun.cost` (full mode, the offline model, one core; a
    conditioned run's cost is per condition, fitted on the pre-trained one)."""
    if not _FIT:
        runs = []
        for name, spec in BOOK_RUNS.items():
            _, limit, settings = _arguments(name, CONDITIONS[0] if spec.conditioned else None,
                                            False)
            runs.append((name, limit, settings, spec.cost))
        _FIT.update(fit_throughput(runs))
    return dict(_FIT)


def estimate(name: str, condition: str | None = None, model: str | None = None, *,
             scale: float = 1.0, quick: bool | None = None) -> float:
    """Estimated seconds of book run ``name`` on ``model`` (a name of
    :data:`cmixlib.book.costs.MODEL_SIZES`; None: the offline model) on a device ``scale`` times
    one core of the build machine (:func:`cmixlib.book.costs.predict` with :func:`cost_fit`), in
    quick or full mode (None: the current one)."""
    _, limit, settings = _arguments(name, condition, quick)
    return predict(*run_flops(name, limit, settings, model), cost_fit(), scale)


def announce(name: str, condition: str | None = None, model: str | None = None, *,
             device: str | None = None, above: float | None = None) -> float | None:
    """Before a run estimated above ``above`` seconds (default
    :data:`cmixlib.book.costs.ANNOUNCE_ABOVE_S`, a minute): print what it computes, on which model
    and device, the estimate with its basis, the papers' model's estimate (offline) and the
    switch to quick mode. ``model`` None: the default model where it loads and has a recorded
    size, else the offline model. Returns the estimate (None: no cost model for the run)."""
    if model is None:
        wanted = default_model_name().rstrip("/").rsplit("/", 1)[-1]
        if wanted in costs.MODEL_SIZES and costs.loadable(default_model_name()):
            model = wanted
    try:
        scale, where = costs.device_scale(device)
        est = estimate(name, condition, model, scale=scale)
    except KeyError:
        return None
    if est < (costs.ANNOUNCE_ABOVE_S if above is None else above):
        return est
    experiment, limit, settings = run_arguments(name, condition)
    fp, fj = costs.run_flops(name, limit, settings, model)
    fit = cost_fit()
    label = name if condition is None else f"{name} ({condition})"
    print(f"Run {label}: {experiment} on {limit or 'all'} examples, model "
          f"{model or 'all-MiniLM-L6-v2 (offline)'}, on {where}.")
    print(f"  estimate: about {costs.human(est)} ({(fp + fj) / 1e12:.1f} TFLOP; one build core "
          f"does {fit['pass'] / 1e9:.0f} GFLOP/s of passes"
          + (f", {fit['jac'] / 1e9:.0f} of HTA Jacobians" if fj else "")
          + f", +{fit['overhead']:.0f} s a run: fitted to this build's measured runs, "
          "cmixlib.book.costs)")
    if model is None and name != "decoder-blimp":
        paper = estimate(name, condition, "bert-base-uncased", scale=scale)
        print(f"  the papers' BERT-base instead: CMIX_MODEL=bert-base-uncased (where it loads), "
              f"about {costs.human(paper)} here")
    print(f"  quick mode (2 examples, only shows the code runs): {costs.QUICK_SWITCH}")
    return est


def book_calls() -> list[tuple[str, str | None]]:
    """Every ``(name, condition)`` the chapters ask :func:`run` for: each book run, once per
    condition for the conditioned ones."""
    return [(name, c) for name, spec in BOOK_RUNS.items()
            for c in (CONDITIONS if spec.conditioned else (None,))]


def mlm_condition_metrics(condition: str) -> dict:
    """:func:`cmixlib.training.mlm_metrics` (masked-word and BLiMP agreement accuracy, cached on
    disk) of the MLM that the Value Zeroing runs read in ``condition``, loaded as they load it
    (:func:`cmixlib.experiments.load_condition_mlm` with the settings of the current mode)."""
    bundle, info = load_condition_mlm(condition, run_arguments("cue-alignment", condition)[2])
    return mlm_metrics(bundle, info["cache_key"])


#: Cached values that chapters compute beside the runs, by name: ``step(condition)``.
#: :func:`prewarm` computes those a run names in :attr:`BookRun.warms` right after it, so that
#: two chapters executed at the same time find them in the cache instead of both computing them.
WARM_STEPS = {"mlm-metrics": mlm_condition_metrics}


def _run_group(calls: list[tuple[str, str | None]], threads: int) -> list[tuple[str, float]]:
    torch.set_num_threads(threads)
    done = []
    for name, condition in calls:
        t0 = time.perf_counter()
        res = run(name, condition)
        label = name if condition is None else f"{name} ({condition})"
        how = "cached" if res.from_cache else f"{res.meta['wall_time_s']:.0f} s"
        print(f"prewarm: {label}: {how}", flush=True)
        done.append((label, time.perf_counter() - t0))
        for step in BOOK_RUNS[name].warms:
            t0 = time.perf_counter()
            WARM_STEPS[step](condition)
            seconds = time.perf_counter() - t0
            print(f"prewarm: {step} of {label}: {seconds:.0f} s", flush=True)
            done.append((f"{step} of {label}", seconds))
    return done


def prewarm_chains(quick: bool | None = None) -> list[list[tuple[str, str | None]]]:
    """The calls of :func:`book_calls` cut into chains that :func:`prewarm` runs one after
    another, longest chain first. Quick mode: one chain per :attr:`BookRun.group` (its models are
    trained in the build, once). Full mode: one chain per call, except that the fine-tuned
    condition's runs share one chain (the prompt-fine-tuned MLM is loaded from its committed weights
    offline, but trained in the build, once, for a model without them (e.g. ``CMIX_MODEL`` set), by
    the first of them); all other models are committed and only loaded."""
    quick = quick_mode() if quick is None else quick
    chains: dict[str, list[tuple[str, str | None]]] = {}
    for name, condition in book_calls():
        key = (BOOK_RUNS[name].group if quick else BOOK_RUNS[name].chain
               or ("mlm-finetuned" if condition == "finetuned" else f"{name}/{condition}"))
        chains.setdefault(key, []).append((name, condition))
    cost = lambda chain: sum(BOOK_RUNS[name].cost for name, _ in chain)  # noqa: E731
    return sorted(chains.values(), key=cost, reverse=True)


def prewarm(jobs: int = 2) -> list[tuple[str, float]]:
    """Compute every book run into the result cache before the chapters are executed: the chains
    of :func:`prewarm_chains` go to ``jobs`` processes (each with cores // jobs torch threads)
    as a queue, longest first, so that a process that finishes takes the next chain. The
    chapters then load the results from the cache; a run already cached costs only its loading.
    Returns ``(run, seconds)`` per run. ``jobs=1`` runs everything in this process."""
    chains = prewarm_chains()
    jobs = max(1, min(int(jobs), len(chains)))
    threads = max(1, (os.cpu_count() or 1) // jobs)
    if jobs == 1:
        return [x for calls in chains for x in _run_group(calls, threads)]
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_run_group, calls, threads) for calls in chains]
        return [x for f in futures for x in f.result()]


def describe_run(res, *, settings: bool = False) -> None:
    """Print what produced a result, from its metadata: experiment, model, data size, wall time
    (and the settings with ``settings=True``). The model's description is printed in full the
    first time a page shows it and by name after that (:func:`cmixlib.book.notebook.model_line`)."""
    m = res.meta
    cached = "  (loaded from the result cache)" if res.from_cache else ""
    print(f"experiment : {m['experiment']}  ->  {m['paper']}")
    print(f"model      : {model_line(m['model'])}")   # in full once per page
    print(f"data size  : {m['data_size']}  (limit={m['limit']})")
    if settings:
        print(f"settings   : {m['settings']}")
    print(f"wall time  : {m['wall_time_s']:.1f} s{cached}")
    for note in m.get("notes", []):
        print(f"note       : {note}")
