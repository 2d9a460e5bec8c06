"""A registry of the papers' experiments, run by name, with results cached on disk.

Each experiment is a function ``f(ctx) -> {frame_name: DataFrame}`` (the frame ``"result"`` is
required) registered with :func:`register`. :func:`run_experiment` runs it (or loads it from the
cache), writes every frame as CSV next to a JSON metadata sidecar and returns a :class:`RunResult`.

**What every output states.** ``meta.json`` holds the experiment, the model asked for and the model
actually used (:meth:`cmixlib.ModelBundle.describe`, which names an offline fallback), the data
size, ``limit``, every setting (defaults merged with overrides), the wall time, the code version,
the creation time, free-text notes (e.g. what could not be computed) and the published numbers the
result is compared with (``paper.csv``; quotes from :mod:`cmixlib.paper_numbers`, never used in any
computation).

**Cache.** ``<root>/results/<experiment>/<key>/`` where ``<root>`` is ``$CMIX_CACHE`` or
``<repo>/.cmix_cache``. ``key`` hashes (experiment, model name, limit, settings, code version).
The code version (:func:`code_version`) hashes the source of every ``cmixlib/*.py`` file that can
change a result (all but the presentation modules: plots, notebook setup, CLI, exercise checkers),
so any such code change, a different model or any changed setting recomputes.

Registered experiments (``cmix list``; each function's docstring gives the exact recipe):

=============================  ===========================================  ====================
name                           what                                         needs
=============================  ===========================================  ====================
globenc-fig5-ln-outliers       LN#1/LN#2 outlier-gain correlation per layer model weights only
alti-fig6-special-ranks        normalised rank of [CLS]/[SEP]/./, (SST-2)   SST-2 classifier*
vz-cue-alignment               dot / AP / probes-needed per layer × method  MLM (+ fine-tuned)*
vz-distance-ablation           VZ cue alignment with 4 distances, VZ A.1    MLM (+ fine-tuned)*
vz-mdl-probing                 MDL compression per layer, VZ Table 2        MLM, vz-cue-alignment
vz-faithfulness                Spearman with blank-out, VZ Table 3          MLM (+ fine-tuned)*
alti-table2                    Spearman with grad-l2 (SST-2), blank-out     classifier*, MLM*
                               (SVA), ALTI Table 2
globenc-correlations           Spearman with G×I saliency per layer,        classifier(s)*
                               GlobEnc Table 1 / Figure 3 / Table 2
alti-fig7-consistency          Spearman between two models' attributions    2 SST-2 classifiers*
                               (same prediction), ALTI Figure 7             (B: a layer-pruned
                                                                            student offline)
globenc-fig4-hta               Pearson of N-Res/N-ResLN/N-Enc with HTA ×    SST-2 classifier*
                               input per layer, GlobEnc Figure 4 (99% CI)   (slow: n·d backward
                                                                            passes per layer)
=============================  ===========================================  ====================

(*) trained and cached by :mod:`cmixlib.training` on first use when the checkpoint has no such
head (e.g. the offline MiniLM fallback); slow on CPU. ``--limit`` keeps the first N examples.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from . import evaluation as ev
from .cache import cache_root, jsonable
from . import paper_numbers as pn

__all__ = ["Experiment", "Context", "RunResult", "REGISTRY", "register", "run_experiment",
           "load_condition_mlm",
           "list_experiments", "code_version", "PRESENTATION_MODULES", "results_root", "cache_key", "comparison_table", "blimp_sample",
           "padded_batch", "IG_STEPS"]

from .cache import CACHE_ENV_VAR  # noqa: E402  (re-exported)


# ============================================================================================
# Registry, cache, runner
# ============================================================================================
@dataclass
class Experiment:
    name: str
    title: str
    paper: str
    func: Callable[["Context"], Mapping[str, pd.DataFrame]]
    defaults: dict = field(default_factory=dict)
    paper_numbers: Callable[[], pd.DataFrame] | None = None
    compare: Callable[[Mapping[str, pd.DataFrame], pd.DataFrame], pd.DataFrame] | None = None
    description: str = ""
    summary: Callable[[Mapping[str, pd.DataFrame]], str] | None = None


REGISTRY: dict[str, Experiment] = {}


def register(name: str, *, title: str, paper: str, defaults: dict | None = None,
             paper_numbers: Callable[[], pd.DataFrame] | None = None,
             compare: Callable | None = None, summary: Callable | None = None):
    """Decorator adding ``func(ctx)`` to :data:`REGISTRY` under ``name``."""
    def deco(func):
        REGISTRY[name] = Experiment(name=name, title=title, paper=paper, func=func,
                                    defaults=dict(defaults or {}), paper_numbers=paper_numbers,
                                    compare=compare, description=(func.__doc__ or "").strip(),
                                    summary=summary)
        return func
    return deco


@dataclass
class Context:
    """What an experiment function receives."""

    experiment: str
    model: str
    limit: int | None
    settings: dict
    progress: bool = True
    notes: list[str] = field(default_factory=list)
    info: dict = field(default_factory=dict)   # model_description, data_size, ... (goes to meta.json)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def tqdm(self, iterable, **kw):
        from tqdm.auto import tqdm

        return tqdm(iterable, disable=not self.progress, leave=False, **kw)


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


#: Modules that only present or check results (notebook setup, the command line, coursework
#: checkers, plots). No other module imports them (a test checks this), so they cannot change a
#: result, and :func:`code_version` leaves them out: editing a plot does not recompute the book.
PRESENTATION_MODULES = frozenset({"book.py", "book_runs.py", "cli.py", "exercises.py",
                                  "plotting.py", "reproduction.py", "verdicts.py"})


def code_version() -> str:
    """Hash (12 hex) of the source of every ``cmixlib/*.py`` file but :data:`PRESENTATION_MODULES`,
    in name order, and of the adapted MLM's manifest (which holds its weights' checksums)."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for path in sorted(here.glob("*.py")) + [here / "assets" / "minilm_mlm" / "manifest.json"]:
        if path.name in PRESENTATION_MODULES or not path.exists():
            continue
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def cache_key(experiment: str, model: str, limit: int | None, settings: Mapping, version: str) -> str:
    blob = json.dumps(jsonable({"experiment": experiment, "model": model, "limit": limit,
                                 "settings": settings, "code_version": version}), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _resolve_model(model: str | None) -> str:
    if model:
        return model
    from .models import default_model_name

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


def run_experiment(name: str, model: str | None = None, limit: int | None = None,
                   settings: Mapping[str, Any] | None = None, *, out: str | Path | None = None,
                   use_cache: bool = True, progress: bool = True) -> RunResult:
    """Run (or load from the cache) experiment ``name`` and write its files.

    ``settings`` override the experiment's defaults (unknown keys are an error). ``out``: also copy
    the files to this folder as ``<name>.<frame>.csv``, ``<name>.meta.json``, ``<name>.paper.csv``.
    """
    if name not in REGISTRY:
        raise KeyError(f"Unknown experiment {name!r}. Known: {', '.join(sorted(REGISTRY))}")
    exp = REGISTRY[name]
    unknown = sorted(set(settings or {}) - set(exp.defaults))
    if unknown:
        raise ValueError(f"Experiment {name!r} has no setting(s) {unknown}; settings: {sorted(exp.defaults)}")
    merged = {**exp.defaults, **(settings or {})}
    model_name = _resolve_model(model)
    version = code_version()
    key = cache_key(name, model_name, limit, merged, version)
    directory = results_root() / name / key
    cached = _load_cached(directory) if use_cache else None
    if cached is not None:
        frames, meta, paper = cached
        res = RunResult(frames=frames, meta=meta, directory=directory, from_cache=True, paper=paper,
                        files=sorted(directory.iterdir()))
    else:
        ctx = Context(experiment=name, model=model_name, limit=limit, settings=merged, progress=progress)
        t0 = time.perf_counter()
        frames = dict(exp.func(ctx))
        wall = time.perf_counter() - t0
        if "result" not in frames:
            raise RuntimeError(f"Experiment {name!r} returned no 'result' frame")
        paper = exp.paper_numbers() if exp.paper_numbers is not None else None
        from . import __version__

        meta = {
            "experiment": name, "title": exp.title, "paper": exp.paper,
            "model_requested": model_name,
            "model": ctx.info.pop("model_description", model_name),
            "data_size": ctx.info.pop("data_size", None), "limit": limit, "settings": merged,
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
        res = RunResult(frames=frames, meta=json.loads(json.dumps(jsonable(meta))), directory=directory,
                        from_cache=False, paper=paper, files=sorted(directory.iterdir()))
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
    """Name, paper, title and default settings of every registered experiment."""
    return pd.DataFrame([{"name": e.name, "paper": e.paper, "title": e.title,
                          "settings": json.dumps(jsonable(e.defaults))} for e in REGISTRY.values()])


def comparison_table(ours: pd.DataFrame, paper: pd.DataFrame, on: list[str], *,
                     ours_value: str = "mean", paper_filter: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Outer-merge our numbers with the paper's on ``on`` (e.g. ``["cmix_method", "condition"]``).

    Columns: the keys, ``ours`` (+ ``ours_std`` if present), ``paper``, ``paper_std``,
    ``paper_model``, ``paper_method`` (the printed label).
    """
    p = paper.drop(columns=["paper"], errors="ignore")
    for k, v in (paper_filter or {}).items():
        p = p[p[k] == v]
    if "method" in p.columns:
        p["paper_method"] = p["method"]
    p = p.rename(columns={"value": "paper", "std": "paper_std", "model": "paper_model"})
    keep = [c for c in on + ["paper", "paper_std", "paper_model", "paper_method"] if c in p.columns]
    o = ours.rename(columns={ours_value: "ours", "std": "ours_std"})
    okeep = [c for c in on + ["ours", "ours_std", "n"] if c in o.columns]
    return o[okeep].merge(p[keep], on=on, how="outer")


# ============================================================================================
# Model and data helpers (monkeypatched in tests)
# ============================================================================================
def load_condition_mlm(condition: str, settings: Mapping | None = None, model: str | None = None,
                       progress: bool = False):
    """``(bundle, info)`` of the Value Zeroing experiments' MLM for ``condition``: the
    pre-trained MLM (:func:`cmixlib.training.load_mlm_model`) or its prompt-fine-tuned copy
    (:func:`cmixlib.training.load_finetuned_mlm`; ``settings`` may hold the experiments'
    ``ft_epochs`` and ``ft_max_train_examples``), exactly as the experiments load them."""
    from . import training

    settings = settings or {}
    if condition == "pretrained":
        return training.load_mlm_model(model, evaluate=False, progress=progress)
    if condition == "finetuned":
        kw = {}
        if settings.get("ft_epochs") is not None:
            kw["epochs"] = settings["ft_epochs"]
        if settings.get("ft_max_train_examples") is not None:
            kw["max_train_examples"] = settings["ft_max_train_examples"]
        return training.load_finetuned_mlm(model, progress=progress, **kw)
    raise ValueError(f"condition must be 'pretrained' or 'finetuned', not {condition!r}")


def _load_mlm(ctx: Context, condition: str):
    """:func:`load_condition_mlm` with a run's model, settings and progress flag."""
    return load_condition_mlm(condition, ctx.settings, ctx.model, ctx.progress)


def _load_classifier(ctx: Context, task: str):
    """``(bundle, info)``: a sequence classifier fine-tuned on ``task`` (cmixlib.training)."""
    from . import training

    return training.train_classifier(task, ctx.model, max_train_examples=ctx.settings.get("cls_max_train_examples"),
                                     epochs=ctx.settings.get("cls_epochs", 2), progress=ctx.progress)


def _load_base(ctx: Context):
    from .models import load_model

    return load_model(ctx.model)


def blimp_sample(bundle, limit: int | None) -> list[dict]:
    """BLiMP agreement test split; with ``limit``, a seeded random sample (numpy seed 0) kept in
    split order, so that a small run still mixes the five subsets (the split is grouped by subset)."""
    from . import data

    ex = data.load_blimp_agreement(bundle.tokenizer, split="test")
    if limit is None or limit >= len(ex):
        return ex
    keep = sorted(np.random.default_rng(0).choice(len(ex), size=limit, replace=False).tolist())
    return [ex[i] for i in keep]


def _sst2(bundle, limit: int | None) -> list[dict]:
    from . import data

    return data.load_sst2_inputs(bundle.tokenizer, split="dev", limit=limit)


def _sva(bundle, limit: int | None) -> list[dict]:
    from . import data

    return data.load_sva(bundle.tokenizer, limit=limit if limit is not None else 500, seed=0)


def _describe(bundle, info: dict | None = None) -> str:
    text = bundle.describe() if hasattr(bundle, "describe") else str(getattr(bundle, "name", bundle))
    if info and info.get("accuracy") is not None:
        text += f"; accuracy {info['accuracy']:.3f}"
    return text


def _ids(ex) -> "Any":
    import torch

    return torch.as_tensor([list(ex["input_ids"])], dtype=torch.long)


#: Gauss-Legendre steps of integrated gradients in the Value Zeroing experiments. Layer-wise IG costs
#: one pass through the layers above l for every step and layer, the largest share of
#: vz-cue-alignment; benchmarks/bench_cue_alignment.py measures the trade-off (maps at 4 steps
#: against 50: median Spearman 0.99 on the fine-tuned model) that keeps the whole experiment within
#: 15 minutes on 2 CPU cores. Use ``--set ig_steps=16`` (or more) for converged maps.
IG_STEPS = 4

#: VZ Figure 1-2 / Table 2 methods -> how to compute them.
GRADIENT_METHODS = {"grad_x_input": "grad_x_input_l2", "integrated_gradients": "integrated_gradients",
                    "deeplift": "deeplift", "grad_l2": "grad_l2"}
VZ_LAYER_METHODS = ["random", "attention", "attn_norm", "attn_norm_res", "attn_norm_res_ln", "globenc_layer",
                    "alti_layer", "value_zeroing", "grad_x_input", "integrated_gradients", "deeplift"]
VZ_GLOBAL_METHODS = ["random", "attention_rollout", "rollout:attn_norm", "rollout:attn_norm_res",
                     "rollout:attn_norm_res_ln", "globenc", "alti", "value_zeroing_rollout", "grad_x_input",
                     "integrated_gradients", "deeplift"]


def _mlm_target(ex, settings):
    from .gradients import MLMTarget

    return MLMTarget(int(ex["target_index"]), int(ex["target_id"]),
                     None if ex.get("foil_id") is None else int(ex["foil_id"]),
                     score=settings.get("grad_score", "prob"))


def _target_rows(bundle, ex, methods: list[str], settings: Mapping, *, level: str, seed: int) -> dict[str, np.ndarray]:
    """Scores of the target row of one example (see :func:`_target_rows_batch`)."""
    return _target_rows_batch(bundle, [ex], methods, settings, level=level, seeds=[seed])[0]


#: examples per batch in the experiments (sorted by length first, so padding stays small); results
#: do not depend on it beyond float rounding (padded batches are tested against single runs)
BATCH_SIZE = 32


def _length_batches(examples: list[dict], size: int = BATCH_SIZE) -> list[list[int]]:
    """Indices of ``examples`` in batches of similar length (stable sort by token count)."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i]["input_ids"]))
    return [order[k:k + size] for k in range(0, len(order), size)]


def _batched_rows(ctx: Context, bundle, examples: list[dict], *, level: str, desc: str):
    """Yield ``(index, example, {method: target-row scores})`` for ``ctx.settings["methods"]``, one
    length batch at a time (:func:`_target_rows_batch`), with a progress bar; the random baseline of
    example ``i`` is seeded with ``seed * 100003 + i``."""
    s = ctx.settings
    with ctx.tqdm(None, total=len(examples), desc=desc) as bar:
        for idx in _length_batches(examples):
            batch = [examples[i] for i in idx]
            scores = _target_rows_batch(bundle, batch, list(s["methods"]), s, level=level,
                                        seeds=[int(s.get("seed", 0)) * 100003 + i for i in idx])
            yield from zip(idx, batch, scores)
            bar.update(len(idx))


def padded_batch(examples: list[dict], pad_id: int = 0):
    """``(input_ids, attention_mask)`` ``(B, n)`` long tensors of the examples' ``input_ids``,
    right-padded with ``pad_id`` (:func:`cmixlib.training.pad_sequences`)."""
    from .training import pad_sequences

    return pad_sequences([ex["input_ids"] for ex in examples], int(pad_id))


def _target_rows_batch(bundle, exs: list[dict], methods: list[str], settings: Mapping, *, level: str,
                       seeds: list[int]) -> list[dict[str, np.ndarray]]:
    """For each example, the scores of its target row for each method: ``(L, n)`` (level="layers")
    or ``(n,)`` (level="input": the last layer of context-mixing maps and rollouts, gradients at the
    word embeddings). One padded forward for the context-mixing maps and one
    :func:`cmixlib.gradients.batch_attribute` call for all gradient methods serve the whole batch."""
    from . import core
    from .attention import rollout
    from .gradients import batch_attribute

    model, tok = bundle.model, bundle.tokenizer
    lengths = [len(ex["input_ids"]) for ex in exs]
    ids, mask = padded_batch(exs, getattr(tok, "pad_token_id", None) or 0)
    pos = [int(ex["target_index"]) for ex in exs]
    out: list[dict[str, np.ndarray]] = [{} for _ in exs]
    cm_methods = [m for m in methods if m in core.METHODS]
    roll_bases = [m.split(":", 1)[1] for m in methods if m.startswith("rollout:")]
    need = sorted(set(cm_methods) | set(roll_bases))
    if need:
        rows = [[t] for t in pos] if not roll_bases and level == "layers" else None
        maps = core.context_mixing(model, tok, {"input_ids": ids, "attention_mask": mask}, methods=need, rows=rows,
                                   vz_distance=settings.get("vz_distance", "cosine"),
                                   vz_standardize=settings.get("vz_standardize"))
        maps = maps if isinstance(maps, list) else [maps]
        for b, t in enumerate(pos):
            for m in cm_methods:
                out[b][m] = maps[b][m][:, t, :] if level == "layers" else maps[b][m][-1, t, :]
            for base in roll_bases:
                r = rollout(maps[b][base], add_identity=False, normalize=True)
                out[b][f"rollout:{base}"] = r[:, t, :] if level == "layers" else r[-1, t, :]
    grad = [m for m in methods if m in GRADIENT_METHODS]
    if grad:
        res = batch_attribute(model, ids, [_mlm_target(ex, settings) for ex in exs],
                              [GRADIENT_METHODS[m] for m in grad], level, attention_mask=mask, tokenizer=tok,
                              aggregate=settings.get("grad_aggregate", "l2"), n_steps=settings.get("ig_steps", IG_STEPS))
        for b in range(len(exs)):
            for m in grad:
                out[b][m] = res[GRADIENT_METHODS[m]][b][..., :lengths[b]]
    if "random" in methods:
        L = _num_layers(model)
        for b in range(len(exs)):
            rng = np.random.default_rng(seeds[b])
            out[b]["random"] = rng.uniform(size=(L, lengths[b]) if level == "layers" else lengths[b])
    return [{m: o[m] for m in methods} for o in out]


def _exclude_positions(ex, mode: str) -> list[int] | None:
    if mode in (None, "none"):
        return None
    n = len(ex["input_ids"])
    ex_pos: list[int] = []
    if "special" in mode:
        ex_pos += [0, n - 1]
    if "target" in mode:
        ex_pos.append(int(ex["target_index"]))
    return sorted(set(ex_pos))


# ============================================================================================
# GlobEnc Figure 5: LN#1 / LN#2 outlier weights
# ============================================================================================
@register("globenc-fig5-ln-outliers", title="Correlation of LN#1 and LN#2 outlier weights per layer",
          paper="GlobEnc (Figure 5)", defaults={"sigma": 3.0, "outliers": "union"})
def globenc_fig5(ctx: Context) -> dict[str, pd.DataFrame]:
    """Per layer: Pearson correlation between the LN#1 and LN#2 gains (gamma) on the outlier
    dimensions (>= ``sigma`` std from the mean gain; ``outliers`` = "ln1", "ln2" or "union" of both
    layers' outlier sets). Needs only the model weights. The paper prints no numbers (figure only)."""
    from scipy.stats import pearsonr

    from .encoder import encoder_layers

    bundle = _load_base(ctx)
    ctx.info["model_description"] = _describe(bundle)
    layers = encoder_layers(bundle.model)
    ctx.info["data_size"] = f"{len(layers)} layers (weights only)"
    sigma, which = float(ctx.settings["sigma"]), ctx.settings["outliers"]
    rows, weights = [], []
    for i, mods in enumerate(layers):
        g1 = mods.ln1.weight.detach().cpu().numpy().astype(float)
        g2 = mods.ln2.weight.detach().cpu().numpy().astype(float)
        o1 = np.abs(g1 - g1.mean()) >= sigma * g1.std()
        o2 = np.abs(g2 - g2.mean()) >= sigma * g2.std()
        sel = {"ln1": o1, "ln2": o2, "union": o1 | o2}[which]
        k = int(sel.sum())
        r = float(pearsonr(g1[sel], g2[sel]).statistic) if k >= 3 and np.ptp(g1[sel]) > 0 and np.ptp(g2[sel]) > 0 else float("nan")
        rows.append({"layer": i + 1, "pearson": r, "n_outlier_dims": k, "n_ln1_outliers": int(o1.sum()),
                     "n_ln2_outliers": int(o2.sum()), "corr_all_dims": float(np.corrcoef(g1, g2)[0, 1])})
        weights += [{"layer": i + 1, "dim": d, "ln1": g1[d], "ln2": g2[d], "outlier": bool(sel[d])}
                    for d in range(g1.size)]
    return {"result": pd.DataFrame(rows), "weights": pd.DataFrame(weights)}


# ============================================================================================
# ALTI Figure 6: normalised rank of special tokens
# ============================================================================================
def _cls_methods(settings) -> list[str]:
    return list(settings["methods"])


def _cls_rows_batch(bundle, batch: list[dict], methods: list[str]) -> list[dict[str, np.ndarray]]:
    """For sentence-classification examples (target position 0, [CLS]): the final-layer [CLS] row
    of each context-mixing method and rollout (:func:`_target_rows_batch`, level "input"), and each
    gradient method of the predicted class's probability w.r.t. the word embeddings
    (:func:`cmixlib.gradients.batch_attribute`), one padded batch at a time."""
    from .gradients import ClassTarget, batch_attribute

    mix = [m for m in methods if m not in GRADIENT_METHODS]
    out = (_target_rows_batch(bundle, batch, mix, {}, level="input", seeds=[0] * len(batch))
           if mix else [{} for _ in batch])
    grad = [m for m in methods if m in GRADIENT_METHODS]
    if grad:
        ids, mask = padded_batch(batch, getattr(bundle.tokenizer, "pad_token_id", None) or 0)
        res = batch_attribute(bundle.model, ids, [ClassTarget(None, score="prob")] * len(batch),
                              [GRADIENT_METHODS[m] for m in grad], "input", attention_mask=mask,
                              tokenizer=bundle.tokenizer)
        for b, ex in enumerate(batch):
            for m in grad:
                out[b][m] = res[GRADIENT_METHODS[m]][b][:len(ex["input_ids"])]
    return [{m: o[m] for m in methods} for o in out]


def _alti_fig6_compare(frames, paper):
    ours = frames["result"].rename(columns={"method": "cmix_method"})
    return comparison_table(ours, paper, ["cmix_method"])


@register("alti-fig6-special-ranks", title="Mean normalised rank of [CLS]/[SEP]/./, on SST-2",
          paper="ALTI (Figure 6)",
          defaults={"condition": "finetuned", "methods": ["attention", "attention_rollout",
                                                          "rollout:attn_norm_res_ln", "alti", "grad_l2"],
                    "rank_scheme": "dense", "cls_epochs": 2, "cls_max_train_examples": 1500},
          paper_numbers=pn.alti_repo_special_token_ranks, compare=_alti_fig6_compare)
def alti_fig6(ctx: Context) -> dict[str, pd.DataFrame]:
    """For each SST-2 dev sentence, the final-layer [CLS] row of each method is turned into normalised
    dense ranks and the ranks of [CLS], [SEP], "." and "," are averaged; then the mean over sentences.
    ``condition="finetuned"`` trains an SST-2 classifier (cmixlib.training); ``"pretrained"`` uses
    the bare encoder (no gradient method then). Paper numbers: the ALTI repository's values."""
    s = ctx.settings
    if s["condition"] == "finetuned":
        bundle, info = _load_classifier(ctx, "sst2")
    else:
        bundle, info = _load_base(ctx), None
    ctx.info["model_description"] = _describe(bundle, info)
    examples = _sst2(bundle, ctx.limit)
    ctx.info["data_size"] = len(examples)
    methods = _cls_methods(s)
    if s["condition"] != "finetuned" and "grad_l2" in methods:
        methods = [m for m in methods if m not in GRADIENT_METHODS]
        ctx.note("gradient methods skipped: the pre-trained encoder has no classification head")
    per: dict[str, list[float]] = {m: [] for m in methods}
    vectors: dict[int, dict[str, np.ndarray]] = {}
    with ctx.tqdm(None, total=len(examples), desc="sentences") as bar:
        for idx in _length_batches(examples):
            batch = [examples[i] for i in idx]
            vectors.update(zip(idx, _cls_rows_batch(bundle, batch, methods)))
            bar.update(len(idx))
    for i, ex in enumerate(examples):
        for m in methods:
            per[m].append(ev.special_token_rank(vectors[i][m], ex["tokens"], scheme=s["rank_scheme"]))
    df = ev.correlation_table(per)
    return {"result": df}


# ============================================================================================
# Value Zeroing §5: cue alignment per layer and method
# ============================================================================================
def _alignment_summary(frames) -> str:
    df = frames["result"]
    parts = []
    for metric in ("dot", "ap", "probes_needed"):
        piv = df[df.metric == metric].pivot_table(index="method", columns="layer", values="mean", sort=False)
        parts.append(f"{metric} (mean over examples; rows = method, columns = layer 0..L-1):\n"
                     + piv.to_string(float_format=lambda v: f"{v:.3f}"))
    return "\n".join(parts)


@register("vz-cue-alignment", summary=_alignment_summary, title="Layer-wise cue alignment (dot, AP, probes-needed) on BLiMP agreement",
          paper="Value Zeroing (Figures 1, 2, A.2)",
          defaults={"condition": "pretrained", "methods": VZ_LAYER_METHODS, "exclude": "none",
                    "ties": "optimistic", "grad_score": "prob", "grad_aggregate": "l2", "ig_steps": IG_STEPS,
                    "ft_epochs": None, "ft_max_train_examples": None, "seed": 0})
def vz_cue_alignment(ctx: Context) -> dict[str, pd.DataFrame]:
    """For each BLiMP agreement test example, the [MASK] row of every method at every layer is
    normalised (negatives clipped) and compared with the binary cue vector: dot product, average
    precision, probes-needed. Gradients are taken w.r.t. each layer's input representations of the
    MLM score (``grad_score``: "prob" = softmax over target and foil). ``exclude``: "none" (default,
    as the paper), "special", "target" or "special+target", with renormalisation. The paper shows
    these as heat maps only (no printed numbers)."""
    s = ctx.settings
    bundle, info = _load_mlm(ctx, s["condition"])
    ctx.info["model_description"] = _describe(bundle, info)
    examples = blimp_sample(bundle, ctx.limit)
    ctx.info["data_size"] = len(examples)
    rows = []
    for i, ex, m in _batched_rows(ctx, bundle, examples, level="layers", desc=f"cue alignment ({s['condition']})"):
        rows += ev.alignment_rows(m, ex["cue_indices"], example_id=i,
                                  exclude=_exclude_positions(ex, s["exclude"]), ties=s["ties"])
    per_ex = pd.DataFrame(rows).sort_values("example", kind="stable")
    agg = ev.aggregate_alignment(per_ex)
    agg.insert(0, "condition", s["condition"])
    return {"result": agg}


# ============================================================================================
# Value Zeroing Appendix A.1: the distance used in Value Zeroing
# ============================================================================================
VZ_DISTANCE_VARIANTS = {"cosine": ("cosine", False), "euclidean": ("euclidean", False),
                        "spearman": ("spearman", False), "cosine, standardised": ("cosine", True)}


def _distance_summary(frames) -> str:
    df = frames["result"]
    piv = df[df.metric == "dot"].pivot_table(index="variant", columns="layer", values="mean", sort=False)
    agree = frames["agreement"].pivot_table(index="variant", columns="layer", values="spearman", sort=False)
    return ("dot product per layer (mean over examples):\n" + piv.to_string(float_format=lambda v: f"{v:.3f}")
            + "\n\nSpearman of each variant's [MASK] row with the cosine row (mean over examples):\n"
            + agree.to_string(float_format=lambda v: f"{v:.3f}"))


@register("vz-distance-ablation", summary=_distance_summary,
          title="Value Zeroing with cosine, Euclidean, Spearman and standardised-cosine distances",
          paper="Value Zeroing (Appendix A.1, Figure A.1)",
          defaults={"condition": "pretrained", "variants": list(VZ_DISTANCE_VARIANTS), "exclude": "none",
                    "ties": "optimistic", "ft_epochs": None, "ft_max_train_examples": None})
def vz_distance_ablation(ctx: Context) -> dict[str, pd.DataFrame]:
    """Layer-wise cue alignment (as ``vz-cue-alignment``) of Value Zeroing computed with each
    distance of Appendix A.1: cosine (the paper's), Euclidean, Spearman (1 - rank correlation of the
    two representations) and cosine after per-dimension standardisation of the representations
    (Timkey & van Schijndel 2021; mean and std over the sentence's tokens, see
    :func:`cmixlib.value_zeroing.value_zeroing_layer`). Also the Spearman correlation of each
    variant's [MASK] row with the cosine row, per layer ("agreement"). The paper reports no numbers,
    only that the pattern did not change."""
    from .evaluation import spearman

    s = ctx.settings
    unknown = [v for v in s["variants"] if v not in VZ_DISTANCE_VARIANTS]
    if unknown:
        raise ValueError(f"Unknown variant(s) {unknown}; choose from {list(VZ_DISTANCE_VARIANTS)}.")
    bundle, info = _load_mlm(ctx, s["condition"])
    ctx.info["model_description"] = _describe(bundle, info)
    examples = blimp_sample(bundle, ctx.limit)
    ctx.info["data_size"] = len(examples)
    rows, agree = [], []
    with ctx.tqdm(None, total=len(examples), desc=f"VZ distances ({s['condition']})") as bar:
        for idx in _length_batches(examples):
            batch = [examples[i] for i in idx]
            per_variant = {}
            for v in s["variants"]:
                dist, std = VZ_DISTANCE_VARIANTS[v]
                per_variant[v] = _target_rows_batch(bundle, batch, ["value_zeroing"],
                                                    {"vz_distance": dist, "vz_standardize": std or None},
                                                    level="layers", seeds=list(idx))
            for k, (i, ex) in enumerate(zip(idx, batch)):
                maps = {v: per_variant[v][k]["value_zeroing"] for v in s["variants"]}
                rows += ev.alignment_rows(maps, ex["cue_indices"], example_id=i,
                                          exclude=_exclude_positions(ex, s["exclude"]), ties=s["ties"])
                if "cosine" in maps:
                    agree += [{"example": i, "variant": v, "layer": layer,
                               "spearman": spearman(maps[v][layer], maps["cosine"][layer])}
                              for v in maps for layer in range(maps[v].shape[0])]
            bar.update(len(idx))
    per_ex = pd.DataFrame(rows).sort_values("example", kind="stable").rename(columns={"method": "variant"})
    agg = ev.aggregate_alignment(per_ex, by=("variant", "layer"))
    agg.insert(0, "condition", s["condition"])
    agreement = (pd.DataFrame(agree).groupby(["variant", "layer"], sort=False)["spearman"].mean().reset_index()
                 if agree else pd.DataFrame(columns=["variant", "layer", "spearman"]))
    return {"result": agg, "agreement": agreement}


# ============================================================================================
# Value Zeroing §6: MDL probing per layer, and Table 2
# ============================================================================================
def _mask_states(bundle, examples, ctx) -> np.ndarray:
    """(L+1, N, d) hidden states at the target position."""
    import torch

    feats = []
    base = bundle.model
    with torch.no_grad():
        for ex in ctx.tqdm(examples, desc="hidden states"):
            out = base(input_ids=_ids(ex), output_hidden_states=True)
            feats.append(torch.stack([h[0, int(ex["target_index"])] for h in out.hidden_states]).cpu().numpy())
    return np.stack(feats, axis=1)


_CONDITION = {"pretrained": "pre-trained", "finetuned": "fine-tuned"}


def _vz_table2_compare(frames, paper):
    ours = frames["result"].rename(columns={"method": "cmix_method", "spearman": "mean"})
    ours["condition"] = ours["condition"].map(_CONDITION)
    return comparison_table(ours, paper[paper.condition.isin(set(ours.condition))], ["cmix_method", "condition"])


@register("vz-mdl-probing", title="MDL probing of number at [MASK] per layer, and its Spearman with cue alignment",
          paper="Value Zeroing (Figure 3, Table 2)",
          defaults={"condition": "pretrained", "methods": VZ_LAYER_METHODS, "blocks": [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50, 100],
                    "probe_hidden": 128, "probe_seed": 0, "probe_limit": None, "alignment_metric": "dot", "exclude": "none",
                    "ties": "optimistic", "grad_score": "prob", "grad_aggregate": "l2", "ig_steps": IG_STEPS,
                    "ft_epochs": None, "ft_max_train_examples": None, "seed": 0},
          paper_numbers=pn.vz_table2, compare=_vz_table2_compare)
def vz_mdl(ctx: Context) -> dict[str, pd.DataFrame]:
    """Compression (online-code MDL, :func:`cmixlib.probing.mdl_probe`, bits) of singular/plural from
    the [MASK] hidden state of layers 0..L (0 = embeddings), then Spearman's rho over layers 1..L
    between compression and each method's mean layer-wise cue alignment (``alignment_metric``; map
    of layer k paired with the output of layer k), the alignment coming from ``vz-cue-alignment``
    run with the same model, limit and settings (cached). ``probe_limit`` lets the probe use more
    examples than the alignment (None: the same ``limit``; 0: the whole test split)."""
    from .probing import mdl_by_layer

    s = ctx.settings
    bundle, info = _load_mlm(ctx, s["condition"])
    ctx.info["model_description"] = _describe(bundle, info)
    probe_limit = s["probe_limit"] if s["probe_limit"] is not None else ctx.limit
    examples = blimp_sample(bundle, probe_limit if probe_limit and probe_limit > 0 else None)
    ctx.info["data_size"] = {"probing": len(examples), "alignment": f"limit={ctx.limit}"}
    labels = np.array([1 if ex["label"] == "plural" else 0 for ex in examples])
    feats = _mask_states(bundle, examples, ctx)
    comp = mdl_by_layer(feats, labels, num_classes=2, blocks=s["blocks"],   # singular/plural
                        hidden=s["probe_hidden"], seed=s["probe_seed"])
    comp.insert(0, "condition", s["condition"])
    align_keys = ["condition", "methods", "exclude", "ties", "grad_score", "grad_aggregate", "ig_steps",
                  "ft_epochs", "ft_max_train_examples", "seed"]
    align = run_experiment("vz-cue-alignment", ctx.model, ctx.limit, {k: s[k] for k in align_keys},
                           progress=ctx.progress).result
    ctx.note(f"alignment from vz-cue-alignment cache {align_key_note(align)}")
    a = align[align.metric == s["alignment_metric"]]
    c = comp.set_index("layer")["compression"]
    rows = []
    for m, g in a.groupby("method", sort=False):
        g = g.sort_values("layer")
        x = g["mean"].to_numpy()
        y = np.array([c[k + 1] for k in g["layer"]])
        rows.append({"condition": s["condition"], "method": m, "spearman": ev.spearman(x, y),
                     "n_layers": len(x), "alignment_metric": s["alignment_metric"]})
    return {"result": pd.DataFrame(rows), "compression": comp}


def align_key_note(df: pd.DataFrame) -> str:
    return f"({df['method'].nunique()} methods, {df['layer'].nunique()} layers)"


# ============================================================================================
# Value Zeroing §7: faithfulness (Table 3)
# ============================================================================================
def _vz_table3_compare(frames, paper):
    ours = frames["result"].rename(columns={"method": "cmix_method"})
    ours["condition"] = ours["condition"].map(_CONDITION)
    return comparison_table(ours, paper[paper.condition.isin(set(ours.condition))], ["cmix_method", "condition"])


@register("vz-faithfulness", title="Spearman of aggregated scores with blank-out at [MASK]",
          paper="Value Zeroing (Table 3)",
          defaults={"condition": "pretrained", "methods": VZ_GLOBAL_METHODS, "replacement": "unk",
                    "exclude": "special+target", "also_exclude": ["target"], "grad_score": "prob",
                    "grad_aggregate": "l2", "ig_steps": IG_STEPS,
                    "ft_epochs": None, "ft_max_train_examples": None, "seed": 0},
          paper_numbers=pn.vz_table3, compare=_vz_table3_compare)
def vz_faithfulness(ctx: Context) -> dict[str, pd.DataFrame]:
    """Per BLiMP test example: blank-out scores p(t|x) - p(t|x with token i -> [UNK]) (probability
    over target and foil only), and each method's global score for the [MASK] row (rollout of the
    layer maps; gradients w.r.t. the input word embeddings). Spearman per example over the positions
    left after ``exclude`` (default: [CLS], [SEP] and the target; blank-out also replaces the
    target itself, so its score is not 0 and is dropped), then mean ± std. The same scores are
    also correlated over the positions left by each mode in ``also_exclude`` (frame
    ``exclusion``: columns exclude, method, mean, std, n), so a sensitivity check needs no
    second run."""
    from .gradients import MLMTarget, blank_out

    s = ctx.settings
    bundle, info = _load_mlm(ctx, s["condition"])
    ctx.info["model_description"] = _describe(bundle, info)
    examples = blimp_sample(bundle, ctx.limit)
    ctx.info["data_size"] = len(examples)
    modes = [s["exclude"], *[m for m in s["also_exclude"] if m != s["exclude"]]]
    rho: dict[str, dict[int, dict[str, float]]] = {mode: {} for mode in modes}
    for i, ex, sc in _batched_rows(ctx, bundle, examples, level="input", desc=f"faithfulness ({s['condition']})"):
        t = int(ex["target_index"])
        bo = blank_out(bundle.model, _ids(ex), MLMTarget(t, int(ex["target_id"]), int(ex["foil_id"])),
                       replacement=s["replacement"], tokenizer=bundle.tokenizer, skip_special=False)
        for mode in modes:
            excl = _exclude_positions(ex, mode)
            rho[mode][i] = {m: ev.per_example_spearman([v], [bo], exclude=excl)[0] for m, v in sc.items()}
    tables = {mode: ev.correlation_table({m: [r[i][m] for i in sorted(r)] for m in s["methods"]},
                                         condition=s["condition"])
              for mode, r in rho.items()}
    exclusion = pd.concat([t.assign(exclude=mode) for mode, t in tables.items()], ignore_index=True)
    return {"result": tables[s["exclude"]], "exclusion": exclusion}


# ============================================================================================
# ALTI Table 2
# ============================================================================================
def _alti_t2_compare(frames, paper):
    return comparison_table(frames["result"].rename(columns={"method": "cmix_method"}), paper,
                            ["cmix_method", "task"])


@register("alti-table2", title="Spearman of final-layer relevance with grad-l2 (SST-2) and blank-out (SVA)",
          paper="ALTI (Table 2)",
          defaults={"tasks": ["sst2", "sva"], "methods": ["attention", "attention_rollout",
                                                          "rollout:attn_norm_res_ln", "alti"],
                    "include_special": True, "blankout_replacement": "mask", "cls_epochs": 2,
                    "cls_max_train_examples": 1500},
          paper_numbers=lambda: pd.concat([pn.alti_table2(), pn.alti_repo_correlations()], ignore_index=True),
          compare=_alti_t2_compare)
def alti_table2(ctx: Context) -> dict[str, pd.DataFrame]:
    """SST-2 (dev split, a classifier fine-tuned by cmixlib.training): Spearman between the
    final-layer [CLS] row of each method and grad-l2 of the predicted class probability w.r.t. the
    word embeddings. SVA (Linzen data, pre-trained MLM, ``limit`` or 500 random sentences): Spearman
    between the [MASK] row and blank-out (token -> ``blankout_replacement``, probability of the
    correct verb over {correct, wrong}). [CLS]/[SEP] included unless ``include_special`` is False;
    frame ``special`` has both variants (column ``special``: "kept"/"dropped") from the same scores."""
    from .gradients import MLMTarget, blank_out

    s = ctx.settings
    tables, descs, sizes = [], [], {}
    for task in s["tasks"]:
        if task == "sst2":
            bundle, info = _load_classifier(ctx, "sst2")
            examples = _sst2(bundle, ctx.limit)
        elif task == "sva":
            bundle, info = _load_mlm(ctx, "pretrained")
            examples = _sva(bundle, ctx.limit)
        else:
            raise ValueError(f"unknown task {task!r}")
        descs.append(f"{task}: {_describe(bundle, info)}")
        sizes[task] = len(examples)
        per: dict[bool, dict[str, list[float]]] = {keep: {m: [] for m in s["methods"]}
                                                   for keep in (True, False)}
        methods = list(s["methods"])
        pairs: dict[int, tuple[np.ndarray, dict[str, np.ndarray]]] = {}
        with ctx.tqdm(None, total=len(examples), desc=f"ALTI Table 2 ({task})") as bar:
            for idx in _length_batches(examples):
                batch = [examples[i] for i in idx]
                if task == "sst2":   # reference = grad-L2 of the predicted class probability
                    rows = _cls_rows_batch(bundle, batch, methods + ["grad_l2"])
                    refs = [r.pop("grad_l2") for r in rows]
                    rows = [{m: r[m] for m in methods} for r in rows]
                else:
                    rows = _target_rows_batch(bundle, batch, methods, {}, level="input",
                                              seeds=[0] * len(batch))
                    refs = [blank_out(bundle.model, _ids(ex),
                                      MLMTarget(int(ex["target_index"]), int(ex["target_id"]),
                                                int(ex["foil_id"])),
                                      replacement=s["blankout_replacement"],
                                      tokenizer=bundle.tokenizer, skip_special=False)
                            for ex in batch]
                pairs.update(zip(idx, zip(refs, rows)))
                bar.update(len(idx))
        for i in range(len(examples)):
            ref, sc = pairs[i]
            for keep in (True, False):
                excl = None if keep else [0, -1]
                for m, v in sc.items():
                    per[keep][m].append(ev.per_example_spearman([v], [ref], exclude=excl)[0])
        name = "SST-2" if task == "sst2" else "SVA"
        tables += [ev.correlation_table(per[keep], task=name, special="kept" if keep else "dropped")
                   for keep in (True, False)]
    ctx.info["model_description"] = " | ".join(descs)
    ctx.info["data_size"] = sizes
    both = pd.concat(tables, ignore_index=True)
    chosen = both[both["special"] == ("kept" if s["include_special"] else "dropped")]
    return {"result": chosen.drop(columns="special").reset_index(drop=True), "special": both}


# ============================================================================================
# GlobEnc Table 1, Figure 3, Table 2
# ============================================================================================
GLOBENC_METHODS = ["attention", "w_fixedres", "w_res", "attn_norm", "n_fixedres", "attn_norm_res",
                   "attn_norm_res_ln", "globenc_layer"]
_TASK_LABEL = {"sst2": "SST-2", "mnli": "MNLI", "hatexplain": "HateXplain"}


def _globenc_compare(frames, paper):
    r = frames["result"]
    last = r[(r.aggregation == "rollout") & (r.layer == r.layer.max())].rename(columns={"method": "cmix_method"})
    return comparison_table(last, paper, ["cmix_method", "task"], paper_filter={"table": "Table 1"})


@register("globenc-correlations", title="Spearman of [CLS] attribution rows with gradient×input saliency, per layer",
          paper="GlobEnc (Table 1, Figure 3, Table 2)",
          defaults={"tasks": ["sst2"], "methods": GLOBENC_METHODS, "rollout_normalize": True,
                    "saliency_level": "embeddings", "cls_epochs": 2, "cls_max_train_examples": 1500},
          paper_numbers=pn.globenc_table1, compare=_globenc_compare)
def globenc_correlations(ctx: Context) -> dict[str, pd.DataFrame]:
    """For each validation example of a fine-tuned classifier: saliency = ||dz_c/de_j ⊙ e_j||_2 with
    z_c the true-class logit and e_j the embedding-layer output (``hidden_states[0]``; level
    "layers" row 0 of cmixlib.gradients); Spearman with the [CLS] row of (a) the rollout up to each
    layer (Table 1 = last layer, Figure 3 = all layers) and (b) each single layer map (Table 2
    "Indiv."). Rollout without identity, rows normalised (``rollout_normalize``)."""
    from . import core
    from .attention import rollout
    from .gradients import ClassTarget, attribute

    s = ctx.settings
    frames, descs, sizes = [], [], {}
    for task in s["tasks"]:
        bundle, info = _load_classifier(ctx, task)
        descs.append(f"{task}: {_describe(bundle, info)}")
        examples = _classification_inputs(bundle, task, ctx.limit)
        sizes[task] = len(examples)
        per: dict[tuple[str, str, int], list[float]] = {}
        for ex in ctx.tqdm(examples, desc=f"GlobEnc ({task})"):
            ids = _ids(ex)
            if s["saliency_level"] == "embeddings":
                sal = attribute(bundle.model, ids, ClassTarget(int(ex["label"])), method="grad_x_input_l2",
                                level="layers")[0]
            else:
                sal = attribute(bundle.model, ids, ClassTarget(int(ex["label"])), method="grad_x_input_l2")
            maps = core.context_mixing(bundle.model, bundle.tokenizer, {"input_ids": ids}, methods=list(s["methods"]),
                                       normalize=bool(s["rollout_normalize"]))
            for m in s["methods"]:
                rolled = rollout(maps[m], add_identity=False, normalize=bool(s["rollout_normalize"]))
                for layer in range(maps[m].shape[0]):
                    per.setdefault((m, "rollout", layer + 1), []).append(ev.spearman(rolled[layer, 0], sal))
                    per.setdefault((m, "individual", layer + 1), []).append(ev.spearman(maps[m][layer, 0], sal))
        rows = [{"task": _TASK_LABEL[task], "method": m, "aggregation": agg, "layer": layer, **ev.mean_std(v)}
                for (m, agg, layer), v in per.items()]
        frames.append(pd.DataFrame(rows))
    ctx.info["model_description"] = " | ".join(descs)
    ctx.info["data_size"] = sizes
    return {"result": pd.concat(frames, ignore_index=True)}


def _classification_inputs(bundle, task: str, limit: int | None) -> list[dict]:
    from . import data

    if task == "sst2":
        return _sst2(bundle, limit)
    from . import training

    d = training.classification_data(task, max_dev_examples=limit)
    xs, ys = d["dev"]
    out = []
    for x, y in zip(xs, ys):
        enc = bundle.tokenizer(*x) if isinstance(x, (list, tuple)) else bundle.tokenizer(x)
        ids = enc["input_ids"][:512]
        out.append({"input_ids": ids, "label": int(y), "target_index": 0})
    return out[:limit] if limit is not None else out


# ============================================================================================
# ALTI Figure 7 (cross-model consistency) and GlobEnc Figure 4 (single-layer agreement with HTA)
# ============================================================================================
def _mean_ci(values, confidence: float) -> dict[str, float]:
    r"""Mean, population std (as :func:`cmixlib.evaluation.mean_std`), ``n`` and a two-sided
    Student-t confidence interval of the mean over the finite values (:func:`scipy.stats.t.interval`):

    .. math:: \bar v \pm t_{(1+c)/2,\; n-1}\, s/\sqrt{n}, \qquad s = \text{sample std (ddof=1)}.

    The bounds are NaN when fewer than 2 values are finite."""
    from scipy import stats

    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    out = {"mean": float(v.mean()) if v.size else float("nan"),
           "std": float(v.std()) if v.size else float("nan"), "n": int(v.size),
           "ci_low": float("nan"), "ci_high": float("nan"), "confidence": float(confidence)}
    if v.size >= 2:
        sem = float(v.std(ddof=1)) / np.sqrt(v.size)
        if sem > 0:
            lo, hi = stats.t.interval(confidence, df=v.size - 1, loc=out["mean"], scale=sem)
        else:
            lo = hi = out["mean"]
        out["ci_low"], out["ci_high"] = float(lo), float(hi)
    return out


def _predicted_class(model, ids) -> int:
    from .gradients import ClassTarget, resolve_target

    return resolve_target(model, ids, ClassTarget()).class_index


def _num_layers(model) -> int:
    from .encoder import encoder_layers

    return len(encoder_layers(model))


#: ALTI Figure 7's methods: ALTI ([CLS] row, last layer) and three input-level gradient methods,
#: aggregated as in ALTI's Appendix B (grad-l2: ||g||; gradient·input: |g·x|; IG: |sum_d ...|).
FIG7_METHODS = ["alti", "grad_l2", "grad_x_input_abs", "integrated_gradients"]


def _load_model_b(ctx: Context, bundle_a) -> tuple[Any, dict, str]:
    """``(bundle, info, how)``: the second SST-2 classifier of ALTI Figure 7 (cmixlib.training).

    ``model_b="auto"``: ``distilbert-base-uncased`` when model A really is ``bert-base-uncased``
    and DistilBERT can be loaded (the paper's pair), else ``"student"``. ``"student"``: model A's
    pre-trained encoder with only the layers ``keep_layers``, then fine-tuned like model A (no
    distillation). DistilBERT's student was initialised from BERT by "taking one layer out of two"
    (Sanh et al. 2019; Hugging Face's script kept layers 0, 2, 4, 7, 9, 11: the first and the last);
    the default here is every other layer counted from the top, so that the last layer, the one the
    classification head reads, is kept: 1, 3, 5 of 6 (MiniLM), 1, 3, ..., 11 of 12. Any other value
    of ``model_b`` is a model name, loaded without the offline fallback.

    Model B is fine-tuned with model A's ``cls_*`` settings except ``b_cls_max_train_examples``
    (default 6,000 sentences) and ``b_cls_epochs`` (None: A's). A pruned student does not learn
    SST-2 from A's 1,500 sentences: with MiniLM, lr 3e-5, 2 epochs, layers 0, 2, 4 reach a dev
    accuracy of 0.509 and layers 1, 3, 5 0.538 (majority class 0.509); with 6,000 sentences layers
    1, 3, 5 reach 0.798.
    """
    from . import training
    from .models import ModelLoadError

    s = ctx.settings
    kw = dict(max_train_examples=s.get("cls_max_train_examples"), epochs=s.get("cls_epochs", 2),
              progress=ctx.progress)
    if s.get("b_cls_max_train_examples") is not None:
        kw["max_train_examples"] = s["b_cls_max_train_examples"]
    if s.get("b_cls_epochs") is not None:
        kw["epochs"] = s["b_cls_epochs"]
    spec = s["model_b"]
    if spec == "auto":
        if getattr(bundle_a, "name", None) == "bert-base-uncased" and not getattr(bundle_a, "is_fallback", True):
            try:
                b, info = training.train_classifier("sst2", "distilbert-base-uncased", allow_fallback=False, **kw)
                return b, info, "distilbert-base-uncased (the paper's second model)"
            except ModelLoadError:
                ctx.note("model_b=auto: distilbert-base-uncased could not be loaded; a DistilBERT-style student is used")
        spec = "student"
    if spec == "student":
        L = _num_layers(bundle_a.model)
        keep = list(s["keep_layers"]) if s["keep_layers"] is not None else list(range(L - 1, -1, -2))[::-1]
        b, info = training.train_classifier("sst2", ctx.model, keep_layers=keep, **kw)
        return b, info, (f"DistilBERT-style student of model A's pre-trained encoder: layers {list(keep)} kept, "
                         "then fine-tuned on SST-2 like model A (no distillation)")
    b, info = training.train_classifier("sst2", spec, allow_fallback=False, **kw)
    return b, info, spec


def _fig7_vectors(bundle, ids, cls: int, methods: list[str], s: Mapping) -> dict[str, np.ndarray]:
    """Final-layer [CLS] rows of context-mixing methods and input-level gradient attributions of
    the predicted-class probability (ALTI's convention) for one sentence."""
    from . import core
    from .gradients import GRADIENT_METHODS as ATTRIBUTION_METHODS, ClassTarget, batch_attribute

    out: dict[str, np.ndarray] = {}
    cm = [m for m in methods if m in core.METHODS]
    if cm:
        maps = core.context_mixing(bundle.model, bundle.tokenizer, {"input_ids": ids}, methods=cm)
        for m in cm:
            out[m] = maps[m][-1, 0]
    grads = [m for m in methods if m in ATTRIBUTION_METHODS]
    if grads:
        # one call: the plain-gradient methods share a pass; "abs" applies to IG / DeepLift only
        res = batch_attribute(bundle.model, ids, [ClassTarget(cls, score="prob")], grads, "input",
                              aggregate="abs", baseline="mask", tokenizer=bundle.tokenizer, n_steps=int(s["ig_steps"]))
        out.update({m: res[m][0] for m in grads})
    return out


def _fig7_summary(frames) -> str:
    fmt = lambda v: f"{v:.3f}"  # noqa: E731
    text = ("models:\n" + frames["models"].to_string(index=False) + "\n\nagreement:\n"
            + frames["agreement"].to_string(index=False) + "\n\nSpearman between the two models' vectors "
            "(samples where both predict the same class):\n" + frames["result"].to_string(index=False, float_format=fmt))
    if "vs_alti" in frames:
        text += ("\n\npaired difference rho(method) - rho(ALTI) over the same sentences:\n"
                 + frames["vs_alti"].to_string(index=False, float_format=fmt))
    return text


@register("alti-fig7-consistency", summary=_fig7_summary,
          title="Spearman between two models' attributions where both predict the same class (SST-2)",
          paper="ALTI (Figure 7)",
          defaults={"methods": FIG7_METHODS, "model_b": "auto", "keep_layers": None, "ig_steps": 100,
                    "include_special": True, "confidence": 0.95, "cls_epochs": 2, "cls_max_train_examples": 1500,
                    "b_cls_epochs": None, "b_cls_max_train_examples": 6000})
def alti_fig7(ctx: Context) -> dict[str, pd.DataFrame]:
    """ALTI Figure 7: two SST-2 classifiers that share a tokenizer (model A = ``--model``, fine-tuned
    by cmixlib.training; model B from ``model_b``, see :func:`_load_model_b`) explain each SST-2 dev
    sentence on which they predict the same class c. Per method, the attribution vectors of the two
    models (ALTI: final-layer [CLS] row of the rollout; gradients w.r.t. the input word embeddings of
    p_c: grad-l2 ||g_j||, gradient·input |g_j·x_j|, IG with a [MASK] baseline and ``ig_steps`` steps,
    |sum_d|) are compared with Spearman's rho over all positions ([CLS]/[SEP] included unless
    ``include_special`` is False); mean over sentences with a t interval. The paper prints no numbers
    (bars only): "our method is the most consistent ..., with grad_l2 following behind"."""
    from . import core
    from .gradients import GRADIENT_METHODS as ATTRIBUTION_METHODS

    s = ctx.settings
    methods = list(s["methods"])
    bad = [m for m in methods if m not in core.METHODS and m not in ATTRIBUTION_METHODS]
    if bad:
        raise ValueError(f"alti-fig7-consistency: unknown method(s) {bad}; use context-mixing methods "
                         f"{sorted(core.METHODS)} or gradient methods {list(ATTRIBUTION_METHODS)}")
    bundle_a, info_a = _load_classifier(ctx, "sst2")
    bundle_b, info_b, how = _load_model_b(ctx, bundle_a)
    va, vb = (getattr(b.tokenizer, "get_vocab", None) for b in (bundle_a, bundle_b))
    if bundle_a.tokenizer is not bundle_b.tokenizer and va is not None and vb is not None and va() != vb():
        raise ValueError("ALTI Figure 7 compares per-token vectors: model B must share model A's tokenizer.")
    ctx.info["model_description"] = f"A: {_describe(bundle_a, info_a)} | B: {_describe(bundle_b, info_b)}"
    ctx.note(f"model B: {how}")
    examples = _sst2(bundle_a, ctx.limit)
    ctx.info["data_size"] = len(examples)
    per: dict[str, list[float]] = {m: [] for m in methods}
    per_rows, correct, agree = [], {"A": 0, "B": 0}, 0
    excl = None if s["include_special"] else [0, -1]
    for k, ex in enumerate(ctx.tqdm(examples, desc="ALTI Figure 7")):
        ids = _ids(ex)
        ca, cb = _predicted_class(bundle_a.model, ids), _predicted_class(bundle_b.model, ids)
        correct["A"] += int(ca == int(ex["label"]))
        correct["B"] += int(cb == int(ex["label"]))
        if ca != cb:
            continue
        agree += 1
        xa = _fig7_vectors(bundle_a, ids, ca, methods, s)
        xb = _fig7_vectors(bundle_b, ids, cb, methods, s)
        for m in methods:
            rho = ev.per_example_spearman([xa[m]], [xb[m]], exclude=excl)[0]
            per[m].append(rho)
            per_rows.append({"example": k, "n_tokens": len(ex["input_ids"]), "predicted": ca, "method": m,
                             "spearman": rho})
    n = len(examples)
    result = pd.DataFrame([{"method": m, **_mean_ci(v, s["confidence"])} for m, v in per.items()])
    models = pd.DataFrame([
        {"model": role, "description": _describe(b), "layers": _num_layers(b.model),
         "dev_accuracy": (i or {}).get("accuracy"), "sample_accuracy": correct[role] / max(1, n), "n": n}
        for role, b, i in (("A", bundle_a, info_a), ("B", bundle_b, info_b))])
    agreement = pd.DataFrame([{"n_sentences": n, "n_same_prediction": agree,
                               "agreement_rate": agree / max(1, n)}])
    ctx.info["model_b"] = how
    frames = {"result": result, "models": models, "agreement": agreement,
              "per_example": pd.DataFrame(per_rows, columns=["example", "n_tokens", "predicted", "method", "spearman"])}
    if "alti" in methods:   # paired over the same sentences: rho(method) - rho(ALTI), the paper's claim is < 0
        ref = np.asarray(per["alti"], dtype=float)
        frames["vs_alti"] = pd.DataFrame([
            {"method": m, "reference": "alti", **_mean_ci(np.asarray(per[m], dtype=float) - ref, s["confidence"])}
            for m in methods if m != "alti"]).rename(columns={"mean": "mean_diff", "std": "std_diff"})
    return frames


# --------------------------------------------------------------------------------------------
# GlobEnc Figure 4
# --------------------------------------------------------------------------------------------
#: GlobEnc Figure 4's attribution maps: N-Res, N-ResLN and N-Enc (single layers, no rollout).
FIG4_METHODS = ["attn_norm_res", "attn_norm_res_ln", "globenc_layer"]


def _correlation(a, b, kind: str) -> float:
    """Pearson's r (:func:`scipy.stats.pearsonr`) or Spearman's rho of two vectors over their
    finite entries; NaN when fewer than 2 remain or either is constant."""
    from scipy.stats import pearsonr

    a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return float("nan")
    if kind == "pearson":
        return float(pearsonr(a, b).statistic)
    return ev.spearman(a, b)


def map_agreement(method_map: np.ndarray, reference_map: np.ndarray, *, correlation: str = "pearson",
                  unit: str = "row", diagonal: bool = True) -> float:
    r"""Agreement of one layer's ``(n, n)`` attribution map with a reference map (e.g. HTA).

    ``unit="row"``: :math:`\frac{1}{n}\sum_i \mathrm{corr}(M_{i,:}, R_{i,:})`, the mean over output
    tokens i of the correlation of their rows (GlobEnc's code correlates the maps row by row, "per
    attender"; rows whose correlation is undefined are skipped). A row correlation is unchanged by
    scaling a row, so row normalisation of either map does not matter. ``unit="map"``: one
    correlation of the two flattened maps. ``correlation``: ``"pearson"`` (the caption of GlobEnc's
    Figure 4) or ``"spearman"``. ``diagonal=False`` leaves out the entries j = i (a token's own
    residual share, which dominates both maps), so that only how the rest is spread is compared.
    """
    if correlation not in ("pearson", "spearman"):
        raise ValueError(f"correlation must be 'pearson' or 'spearman', not {correlation!r}")
    if unit not in ("row", "map"):
        raise ValueError(f"unit must be 'row' or 'map', not {unit!r}")
    m, r = np.asarray(method_map, dtype=float), np.asarray(reference_map, dtype=float)
    if m.shape != r.shape or m.ndim != 2:
        raise ValueError(f"expected two (n, n) maps of the same shape, got {m.shape} and {r.shape}")
    keep = np.ones(m.shape, dtype=bool) if diagonal else ~np.eye(m.shape[0], dtype=bool)
    if unit == "map":
        return _correlation(m[keep], r[keep], correlation)
    rows = [_correlation(m[i][keep[i]], r[i][keep[i]], correlation) for i in range(m.shape[0])]
    rows = [x for x in rows if np.isfinite(x)]
    return float(np.mean(rows)) if rows else float("nan")


#: The three readings of GlobEnc Figure 4's "Pearson correlation of HTA maps with attribution maps"
#: that :func:`globenc_fig4` reports side by side, all from the same maps. "map_raw" (the main one):
#: the whole n x n maps flattened, **un-normalised** (the caption's literal reading; GlobEnc's code
#: keeps raw norms and its HTA files are "undiv"), so that rows with larger totals weigh more.
#: "rows": per row i over all columns, mean over rows (the granularity of GlobEnc's
#: ``compute_spearman_correlation_hta``); "rows_off_diagonal": the same without j = i. A row-wise
#: correlation cannot see a per-row rescaling, such as N-ResLN's division by token i's LN#1 scale.
FIG4_VARIANTS: dict[str, dict] = {"map_raw": {"unit": "map", "diagonal": True},
                                  "rows": {"unit": "row", "diagonal": True},
                                  "rows_off_diagonal": {"unit": "row", "diagonal": False}}


def _fig4_summary(frames) -> str:
    df = frames["result"]
    df = df[df["variant"] == "map_raw"]
    cell = df.assign(text=[f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in zip(df["mean"], df["ci_low"], df["ci_high"])])
    cells = cell.pivot(index="layer", columns="method", values="text")
    conf = df["confidence"].iloc[0] if len(df) else float("nan")
    return (f"mean correlation with HTA × input per layer [{conf:.0%} t interval over sentences], "
            f"n = {int(df['n'].max()) if len(df) else 0} sentences (variant 'map_raw'; 'rows' and "
            "'rows_off_diagonal' are in result.csv):\n" + cells.to_string())


@register("globenc-fig4-hta", summary=_fig4_summary,
          title="Single-layer correlation of N-Res / N-ResLN / N-Enc maps with HTA × input maps (SST-2)",
          paper="GlobEnc (Figure 4)",
          defaults={"methods": FIG4_METHODS, "correlation": "pearson", "max_tokens": 64,
                    "times_input": True, "confidence": 0.99, "cls_epochs": 2, "cls_max_train_examples": 1500})
def globenc_fig4(ctx: Context) -> dict[str, pd.DataFrame]:
    """GlobEnc Figure 4 on the SST-2 classifier of ``globenc-correlations`` (cmixlib.training): for
    the first ``limit`` dev sentences with at most ``max_tokens`` tokens ([CLS]/[SEP] included;
    GlobEnc: the first 256, at most 64 tokens), each layer's HTA × input map (:func:`cmixlib.hta.hta`,
    c_ij = ||d e_i / d e_j ⊙ e_j||_F of that layer alone) is compared with the same layer's maps of
    ``methods`` (no rollout) by :func:`map_agreement` with ``correlation`` (Pearson, as the caption),
    in the three :data:`FIG4_VARIANTS` (column ``variant``; the main reading "map_raw" correlates
    the whole un-normalised maps, all rows and columns, [CLS]/[SEP] and the diagonal included). Per
    layer: mean over sentences with a two-sided ``confidence`` t interval (the figure shows 99%
    intervals). The paper prints no numbers; its claim: N-ResLN agrees much less with HTA than N-Res
    and N-Enc."""
    import time as _time

    from . import core
    from .hta import hta

    s = ctx.settings
    map_agreement(np.eye(2), np.eye(2), correlation=s["correlation"])   # validates the setting
    methods = list(s["methods"])
    bundle, info = _load_classifier(ctx, "sst2")
    ctx.info["model_description"] = _describe(bundle, info)
    pool = _sst2(bundle, None)
    examples = [ex for ex in pool if len(ex["input_ids"]) <= int(s["max_tokens"])]
    examples = examples if ctx.limit is None else examples[:ctx.limit]
    ctx.info["data_size"] = len(examples)
    ctx.note(f"sentences: the first {len(examples)} SST-2 dev sentences with at most {s['max_tokens']} tokens "
             f"(mean length {np.mean([len(e['input_ids']) for e in examples]) if examples else 0:.1f} tokens)")
    rows, seconds = [], []
    for k, ex in enumerate(ctx.tqdm(examples, desc="HTA")):
        ids = {"input_ids": _ids(ex)}
        t0 = _time.perf_counter()
        ref = hta(bundle.model, bundle.tokenizer, ids, times_input=bool(s["times_input"]), normalize=False)
        seconds.append(_time.perf_counter() - t0)
        maps = core.context_mixing(bundle.model, bundle.tokenizer, ids, methods=methods, normalize=False)
        for variant, kw in FIG4_VARIANTS.items():
            for m in methods:
                for layer in range(ref.shape[0]):
                    rows.append({"example": k, "n_tokens": len(ex["input_ids"]), "variant": variant, "method": m,
                                 "layer": layer + 1,
                                 "value": map_agreement(maps[m][layer], ref[layer], correlation=s["correlation"], **kw)})
    per = pd.DataFrame(rows, columns=["example", "n_tokens", "variant", "method", "layer", "value"])
    result = pd.DataFrame([{"variant": v, "method": m, "layer": layer, **_mean_ci(g["value"], s["confidence"])}
                           for (v, m, layer), g in per.groupby(["variant", "method", "layer"], sort=False)])
    ctx.info["hta_seconds_per_sentence"] = [round(x, 2) for x in seconds]
    return {"result": result, "per_example": per}
