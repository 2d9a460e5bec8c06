"""The book's runs: what the chapters ask for is what `make book` prewarms, and run arguments."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from cmixlib import book_runs as B
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
