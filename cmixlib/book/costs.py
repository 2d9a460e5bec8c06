"""What a book run will cost before it starts: FLOPs per sentence by model size and method,
divided by a throughput fitted to this build's measured runs.

A transformer layer of width ``d``, feed-forward width ``f`` and ``h`` heads does, on a sentence
of ``n`` tokens (multiply-add = 2 FLOPs; Q, K, V, O projections, the two FFN maps, scores and the
weighted sum):

.. math::

    \\phi(n) = 2n\\,(4d^2 + 2df) + 4n^2 d, \\qquad F(n) = L\\,\\phi(n)

for a forward pass of ``L`` layers. A book run is a sum of three kinds of work per sentence
(:class:`Work`, read from each run's methods and settings):

* ``passes``: forward-pass equivalents (a gradient costs 3: forward + backward; Integrated
  Gradients with ``s`` steps costs ``3 s``), :math:`k\\,F(n)`;
* ``n_passes``: work that repeats a pass once per token, :math:`k\\,n\\,F(n)` (Value Zeroing
  recomputes every layer with each token's value zeroed; blank-out runs one forward per token);
* ``jacobians``: HTA's closed-form Jacobian blocks, :math:`L\\,(2 n^2 d^3 + 4 n d^2 f)` (the
  ``n^2`` blocks of ``d x d`` each pass through LayerNorm's and the FFN's Jacobians).

The expectations over a data set use its token-length moments :math:`E[n], E[n^2], E[n^3]`
(:data:`DATA_TOKENS`, measured with the offline model's uncased WordPiece tokenizer; BERT-base
and DistilBERT use the same vocabulary). The time is

.. math::

    t = c + \\frac{W_\\text{pass}}{\\tau_\\text{pass}} + \\frac{W_\\text{jac}}{\\tau_\\text{jac}}

with one throughput per kind of kernel (``pass``: batched short-sequence passes; ``jac``: the
large ``d x d`` products of HTA) and a fixed overhead ``c`` per run, fitted
(:func:`fit_throughput`) to the one-core run times of :attr:`cmixlib.book.runs.BookRun.cost`
(the README's "Build time, measured" table; :func:`cmixlib.book.runs.estimate` does this). On
another device the throughputs scale by the ratio of a matrix-product benchmark there to the
same benchmark on the build machine (:data:`BUILD_GEMM_FLOPS`; :func:`device_scale`). On a GPU
the book's short-sequence passes rarely reach its matrix-product speed, so a GPU estimate is a
lower bound (no GPU run of the book has been measured). What the model leaves out (probe
training, attention flow's max-flow, data loading) is inside the fitted constants, not
modelled: ``tests/test_costs.py`` checks every offline estimate is within 2x of each measured
time, except runs under 30 s (dominated by loading), whose estimate need only stay under 30 s.
"""
from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
from huggingface_hub import try_to_load_from_cache

from cmixlib.models.devices import default_device

__all__ = ["ModelSize", "MODEL_SIZES", "DATA_TOKENS", "Work", "run_flops", "fit_throughput",
           "predict", "device_scale", "gemm_flops", "loadable", "human", "ANNOUNCE_ABOVE_S",
           "BUILD_GEMM_FLOPS", "QUICK_SWITCH"]

#: Runs estimated above this many seconds are announced before they start
#: (:func:`cmixlib.book.runs.announce`).
ANNOUNCE_ABOVE_S = 60.0
#: The one-line switch to quick mode (:func:`cmixlib.book.notebook.quick_mode`).
QUICK_SWITCH = "import os; os.environ['CMIX_QUICK'] = '1'   (or CMIX_QUICK=1 in the shell)"
#: FLOP/s of :func:`gemm_flops` on one core of this build's machine (AMD EPYC, one torch thread):
#: measured at 3a94c27 between 25 and 47 GFLOP/s (sizes 768 and 2048, best of 5-15 products)
#: while other processes shared the two cores; the highest is taken as the uncontended speed.
#: The base of :func:`device_scale`.
BUILD_GEMM_FLOPS = 4.7e10


@dataclass(frozen=True)
class ModelSize:
    """Layers, width, feed-forward width and heads of a checkpoint (its config's values)."""

    layers: int
    d: int
    ffn: int
    heads: int
    ffn_maps: int = 2                   # 3 for a gated (SwiGLU) feed-forward network


#: Sizes of the models the book runs (config.json values of each checkpoint).
MODEL_SIZES: dict[str, ModelSize] = {
    "all-MiniLM-L6-v2": ModelSize(6, 384, 1536, 12),
    "student-3-layer": ModelSize(3, 384, 1536, 12),          # ALTI Fig. 7's offline model B
    "bert-base-uncased": ModelSize(12, 768, 3072, 12),
    "distilbert-base-uncased": ModelSize(6, 768, 3072, 12),
    "SmolLM2-135M": ModelSize(30, 576, 1536, 9, ffn_maps=3),
}

#: ``(sentences, E[n], E[n^2], E[n^3])`` of each data set, in uncased WordPiece tokens with
#: [CLS]/[SEP] (measured at 3a94c27 with the offline model's tokenizer; pairs: both segments).
DATA_TOKENS: dict[str, tuple[int, float, float, float]] = {
    "sst2_dev": (872, 25.16, 740.7, 24482.7),
    "sst2_test": (1821, 24.86, 732.9, 24579.1),
    "hatexplain_test": (1924, 29.5, 1119.7, 50228.6),
    "hatexplain_val": (1922, 29.84, 1137.7, 51156.0),
    "mnli_dev": (4000, 39.03, 1858.6, 106400.6),
    "blimp_test": (2359, 9.55, 96.0, 1019.6),
    "sva": (500, 29.43, 990.4, 37389.8),
}


@dataclass(frozen=True)
class Work:
    """Per-sentence work of one part of a run on ``data`` (``count`` sentences; None: all)."""

    data: str
    count: int | None
    passes: float = 0.0
    n_passes: float = 0.0
    jacobians: float = 0.0
    model: str = "main"                 # "main" or "b" (a second model, ALTI Fig. 7)


def _grad(k: int = 1) -> float:
    return 3.0 * k


def _work(name: str, settings: Mapping, limit: int | None) -> list[Work]:
    """The work of book run ``name`` with its settings: what each experiment's compute function
    does per sentence (methods named in the comments)."""
    s = int(settings.get("ig_steps", 4))
    if name in ("cue-alignment", "faithfulness"):
        # attention-norm family (no extra pass), grad x input, DeepLIFT, IG (s steps); VZ;
        # faithfulness also blank-out (one forward per token)
        return [Work("blimp_test", limit, passes=1 + _grad(2) + _grad(s),
                     n_passes=1 + (name == "faithfulness"))]
    if name == "distance-ablation":      # one set of zeroed outputs, four distances
        return [Work("blimp_test", limit, passes=1, n_passes=1)]
    if name == "mdl-probing":            # hidden states (the probes: in the throughput)
        return [Work("blimp_test", limit, passes=1)]
    if name == "rollout-depth":          # VZ maps and blank-out
        return [Work("blimp_test", limit, passes=1, n_passes=2)]
    if name == "alti-table2":            # SST-2: grad-l2; SVA: blank-out
        return [Work("sst2_test", limit, passes=1 + _grad()),
                Work("sva", limit, passes=1, n_passes=1)]
    if name in ("alti-fig6", "alti-figs8-10"):
        return [Work("sst2_test", limit, passes=1 + _grad())]
    if name == "alti-fig3":
        return [Work("sst2_test", limit, passes=1)]
    if name == "alti-fig7":              # both models: ALTI, grad-l2, |grad x input|, IG
        check, ref = int(settings.get("ig_check", 0)), int(settings.get("ig_check_steps", 100))
        out = []
        for m in ("main", "b"):
            out += [Work("sst2_test", limit, passes=1 + _grad(2) + _grad(s), model=m),
                    Work("sst2_test", check, passes=_grad(ref), model=m)]
        return out
    if name == "globenc-correlations":   # G x I saliency per task
        sets = {"sst2": "sst2_dev", "mnli": "mnli_dev", "hatexplain": "hatexplain_val"}
        return [Work(sets[t], limit, passes=1 + _grad())
                for t in settings.get("tasks", ["sst2"])]
    if name == "globenc-fig4":
        return [Work("sst2_dev", limit, passes=1, jacobians=1)]
    if name == "globenc-fig5":           # the LayerNorm gains: weights only, no forward pass
        return []
    if name == "plausibility":           # five gradient methods (IG: s steps), VZ, last-layer flow
        return [Work("hatexplain_test", limit if limit is not None else 1106,
                     passes=1 + _grad(4) + _grad(s), n_passes=1)]
    if name == "decoder-blimp":
        # at most ``limit`` pairs of each of the 5 agreement paradigms: log-probabilities of both
        # sentences; causal VZ recomputes only layer l's MLP for the pairs j <= i (half of n F);
        # blank-out deletes each token (n forwards)
        n = 5 * (limit if limit is not None else 472)
        return [Work("blimp_test", n, passes=2, n_passes=1.5)]
    if name == "paper-examples":         # the papers' example sentences (about 20) through the
        return [Work("sst2_test", 20, passes=1 + _grad(2) + _grad(s), n_passes=2)]  # runs' models
    raise KeyError(f"No cost model for book run {name!r}: add it to cmixlib.book.costs._work.")


def _flops(size: ModelSize, data: str, count: int | None, w: Work) -> tuple[float, float]:
    """``(pass FLOPs, Jacobian FLOPs)`` of ``w`` on ``size`` (the module docstring's sums)."""
    total, m1, m2, m3 = DATA_TOKENS[data]
    k = total if count is None else min(int(count), total) if data != "blimp_test" else int(count)
    L, d, f = size.layers, size.d, size.ffn
    p = 4 * d * d + size.ffn_maps * d * f
    f1 = L * (2 * p * m1 + 4 * d * m2)             # E[F(n)]
    fn = L * (2 * p * m2 + 4 * d * m3)             # E[n F(n)]
    jac = L * (2 * d ** 3 * m2 + 4 * d * d * f * m1)
    return k * (w.passes * f1 + w.n_passes * fn), k * w.jacobians * jac


def _sizes(name: str, model: str | None) -> dict[str, ModelSize]:
    if name == "decoder-blimp":
        return {"main": MODEL_SIZES["SmolLM2-135M"], "b": MODEL_SIZES["SmolLM2-135M"]}
    main = MODEL_SIZES[model or "all-MiniLM-L6-v2"]
    b = (MODEL_SIZES["distilbert-base-uncased"] if model == "bert-base-uncased"
         else MODEL_SIZES["student-3-layer"])
    return {"main": main, "b": b}


def run_flops(name: str, limit: int | None, settings: Mapping,
              model: str | None = None) -> tuple[float, float]:
    """``(pass FLOPs, Jacobian FLOPs)`` of book run ``name`` with its ``limit`` and
    ``settings`` (:func:`cmixlib.book.runs.run_arguments`) on ``model`` (a name of
    :data:`MODEL_SIZES`; None: the offline model). KeyError for a run or model without one."""
    if model is not None and model not in MODEL_SIZES:
        raise KeyError(f"No size recorded for model {model!r}; known: {', '.join(MODEL_SIZES)}.")
    sizes = _sizes(name, model)
    fp = fj = 0.0
    for w in _work(name, settings, limit):
        a, b = _flops(sizes[w.model], w.data, w.count, w)
        fp, fj = fp + a, fj + b
    return fp, fj


def fit_throughput(runs: Iterable[tuple[str, int | None, Mapping, float]]) -> dict[str, float]:
    """``{"pass": FLOP/s, "jac": FLOP/s, "overhead": s}`` fitted to measured runs
    ``(name, limit, settings, seconds)`` on the offline model: a run takes
    ``overhead + W_pass / pass + W_jac / jac`` (the overhead: loading models and data, the same
    for every run; a run without FLOPs, e.g. one that reads weights only, is left out). For each overhead on a 0.5 s grid up to 20 s, each throughput is the
    geometric mean of FLOPs / (measured - overhead) over the runs dominated (> 90 % of FLOPs) by
    its kind; the overhead kept is the one with the smallest worst ratio."""
    rows = []
    for name, limit, settings, seconds in runs:
        fp, fj = run_flops(name, limit, settings)
        if fp + fj <= 0:               # no model computation (e.g. weights only): no throughput
            continue
        rows.append(("jac" if fj > 0.9 * (fp + fj) else "pass", fp + fj, fp, fj, seconds))
    best: tuple[float, dict[str, float]] | None = None
    for step in range(41):
        c = 0.5 * step
        logs: dict[str, list[float]] = {"pass": [], "jac": []}
        for kind, w, _, _, t in rows:
            logs[kind].append(math.log(w / max(t - c, 0.5 * t)))
        fit = {k: math.exp(sum(v) / len(v)) for k, v in logs.items() if v}
        worst = max(abs(math.log(predict(fp, fj, {**fit, "overhead": c}) / t))
                    for _, _, fp, fj, t in rows)
        if best is None or worst < best[0]:
            best = (worst, {**fit, "overhead": c})
    assert best is not None, "no measured runs to fit"
    return best[1]


def predict(fp: float, fj: float, fit: Mapping[str, float], scale: float = 1.0) -> float:
    """Seconds of ``fp`` pass FLOPs and ``fj`` Jacobian FLOPs with throughputs ``fit``
    (:func:`fit_throughput`) on a device ``scale`` times one build core:
    :math:`(c + W_\\text{pass}/\\tau_\\text{pass} + W_\\text{jac}/\\tau_\\text{jac}) / s`."""
    return (fit["overhead"] + fp / fit["pass"] + (fj / fit["jac"] if fj else 0.0)) / scale


def gemm_flops(device: str = "cpu", size: int = 768, repeats: int = 5) -> float:
    """FLOP/s of a ``size x size`` float32 matrix product on ``device`` (best of ``repeats``):
    :math:`2 s^3 / t`."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    best = float("inf")
    for _ in range(repeats + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        (a @ b).sum().item()
        best = min(best, time.perf_counter() - t0)
    return 2 * size ** 3 / best


def device_scale(device: str | None = None, *, threads: int | None = None) -> tuple[float, str]:
    """How many times faster than one core of the build machine ``device`` is, and why:
    CPU: the torch threads in use (the book's runs scale nearly linearly up to the cores);
    CUDA: :func:`gemm_flops` there / :data:`BUILD_GEMM_FLOPS`."""
    dev = str(default_device() if device is None else device)
    if dev.startswith("cuda"):
        g = gemm_flops(dev, size=2048)
        return g / BUILD_GEMM_FLOPS, (f"{torch.cuda.get_device_name(dev)}: matrix products "
                                      f"{g / 1e12:.1f} TFLOP/s, {g / BUILD_GEMM_FLOPS:.0f}x "
                                      "one build core (a lower bound of the time)")
    t = threads or torch.get_num_threads()
    return float(t), f"CPU, {t} thread(s)"


def loadable(name: str, timeout: float = 2.0) -> bool:
    """Whether checkpoint ``name`` can load here: its ``config.json`` is in the Hugging Face
    cache, or the Hub answers (not with ``HF_HUB_OFFLINE`` set)."""
    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return True
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("", "0", "false"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def human(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
