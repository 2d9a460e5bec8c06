"""The book's runs: what the chapters ask for is what `make book` prewarms, and run arguments."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from cmixlib.book import runs as B
from cmixlib.experiments import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
_CALL = re.compile(r"\brun\(\s*\"([\w-]+)\"\s*(?:,\s*([^)]*))?\)")


def _chapter_calls() -> list[tuple[str, str, str]]:
    """(notebook, run name, arguments) of every run("...") call in the chapters' code."""
    calls = []
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                calls += [(path.name, m.group(1), (m.group(2) or "").strip())
                          for m in _CALL.finditer(cell.source)]
    return calls


def test_every_book_run_names_an_experiment_and_a_group():
    for name, spec in B.BOOK_RUNS.items():
        assert spec.experiment in REGISTRY, name
        assert spec.group in {"mlm", "classifier"}, name


def test_prewarm_chains_share_only_what_is_trained_in_the_build():
    """Quick mode: one chain per group (brief classifiers and MLMs trained once). Full mode: the
    fine-tuned condition's runs share one chain (the prompt-fine-tuned MLM is trained in the
    build) with the runs that name it as their chain, every other call is a chain of its own; chains come longest first; every call once."""
    calls = set(B.book_calls())
    quick = B.prewarm_chains(quick=True)
    assert {B.BOOK_RUNS[c[0][0]].group for c in quick} == {"mlm", "classifier"} and len(quick) == 2
    assert all(len({B.BOOK_RUNS[n].group for n, _ in ch}) == 1 for ch in quick)
    full = B.prewarm_chains(quick=False)
    for chains in (quick, full):
        flat = [x for ch in chains for x in ch]
        assert len(flat) == len(set(flat)) and set(flat) == calls
    ft = [ch for ch in full if any(c == "finetuned" for _, c in ch)]
    assert len(ft) == 1 and len(ft[0]) > 1
    # the fine-tuned condition's runs, and the runs that name that chain (they read the model)
    assert all(c == "finetuned" or B.BOOK_RUNS[n].chain == "mlm-finetuned" for n, c in ft[0])
    assert ft[0][0][1] == "finetuned"                  # a fine-tuned run trains it, first
    assert all(len(ch) == 1 for ch in full if ch is not ft[0])
    cost = [sum(B.BOOK_RUNS[n].cost for n, _ in ch) for ch in full]
    assert cost == sorted(cost, reverse=True)


def test_book_calls_cover_every_run_and_condition():
    calls = B.book_calls()
    assert len(calls) == len(set(calls))
    for name, spec in B.BOOK_RUNS.items():
        want = {(name, c) for c in B.CONDITIONS} if spec.conditioned else {(name, None)}
        assert want <= set(calls), name


def test_the_chapters_ask_only_for_prewarmed_runs():
    """`make book` computes book_calls() before executing the chapters; a chapter that asked for
    a run with extra settings (another cache key) would compute it again, unprewarmed."""
    calls = _chapter_calls()
    assert calls, "no run(...) call found: the pattern no longer matches the chapters"
    for nb, name, args in calls:
        assert name in B.BOOK_RUNS, f"{nb}: unknown book run {name!r}"
        assert args in ("", "c", "condition"), \
            f"{nb}: run({name!r}, {args}) adds settings that `cmix prewarm` does not compute"


def test_run_arguments_check_the_condition():
    with pytest.raises(ValueError, match="needs condition"):
        B.run_arguments("cue-alignment")
    with pytest.raises(ValueError, match="takes no condition"):
        B.run_arguments("alti-table2", "pretrained")
    with pytest.raises(KeyError, match="Unknown book run"):
        B.run_arguments("nope")


def test_warm_steps_run_right_after_the_run_that_names_them(monkeypatch):
    """prewarm's process computes a run's warm steps after it, in order, and reports each."""
    import torch
    from types import SimpleNamespace

    for name, spec in B.BOOK_RUNS.items():
        assert set(spec.warms) <= set(B.WARM_STEPS), name
    assert any(spec.warms for spec in B.BOOK_RUNS.values())
    order = []
    monkeypatch.setattr(B, "run", lambda name, condition=None: order.append((name, condition))
                        or SimpleNamespace(from_cache=True, meta={}))
    monkeypatch.setitem(B.WARM_STEPS, "mlm-metrics", lambda c: order.append(("metrics", c)))
    threads = torch.get_num_threads()
    try:
        done = B._run_group([("cue-alignment", "finetuned"), ("faithfulness", "finetuned")], 1)
    finally:
        torch.set_num_threads(threads)
    assert order == [("cue-alignment", "finetuned"), ("metrics", "finetuned"),
                     ("faithfulness", "finetuned")]
    assert [label for label, _ in done] == [
        "cue-alignment (finetuned)", "mlm-metrics of cue-alignment (finetuned)",
        "faithfulness (finetuned)"]


@pytest.mark.slow
def test_prewarmed_mlm_metrics_are_the_ones_chapters_8_and_9_read(monkeypatch, packaged_bundle):
    """The warm step asks mlm_metrics for the same cache entries as chapter 8's
    load_mlm_model() and chapter 9's mlm_metrics(b, info["cache_key"]) (same key, defaults)."""
    from cmixlib import training
    from cmixlib.experiments import load_condition_mlm
    from cmixlib.training import mlm as mlm_module

    asked = []
    record = lambda bundle, key, **kw: asked.append((key, kw)) or {  # noqa: E731
        "agreement_accuracy_test": 1.0}
    monkeypatch.setattr(training, "mlm_metrics", record)
    monkeypatch.setattr(mlm_module, "mlm_metrics", record)
    monkeypatch.setattr(B, "mlm_metrics", record)
    B.mlm_condition_metrics("pretrained")
    training.load_mlm_model(progress=False)                           # chapter 8
    _, info = load_condition_mlm("pretrained", B.run_arguments("cue-alignment", "pretrained")[2])
    training.mlm_metrics(None, info["cache_key"])                      # chapter 9

    import inspect

    defaults = {k: p.default for k, p in inspect.signature(mlm_module.mlm_metrics).parameters.items()
                if k in ("mask_prob", "seed")}

    def settings(kw):
        return {k: kw.get(k, v) for k, v in defaults.items()}
    assert len({(key, tuple(sorted(settings(kw).items()))) for key, kw in asked}) == 1, asked
