"""The cost model (cmixlib.book.costs) against this build's measured run times."""
import re
from pathlib import Path

import pytest

from cmixlib.book import runs as book_runs, costs
from cmixlib.book.runs import BOOK_RUNS, CONDITIONS

README = Path(__file__).resolve().parents[1] / "README.md"
#: Runs this short are dominated by what the FLOP model leaves out (loading models and data,
#: probe fits); for them the estimate must only stay below the announcement threshold.
SHORT_S = 30.0


def _readme_times() -> dict[str, list[float]]:
    """Run name -> seconds in the README's newest column ("a / b" rows split by name)."""
    out: dict[str, list[float]] = {}
    text = README.read_text()
    table = re.search(r"^\| run \(`?[\w.]+`?\) \|", text, re.M)
    assert table, "README: the table of the book's run times is missing"
    for line in text[table.start():].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        names = [n.strip() for n in re.sub(r"\(.*?\)", "", cells[0]).split(" / ")]
        values = [float(v) for v in re.findall(r"\d+", cells[2])]
        if len(names) == 1:
            out.setdefault(names[0], []).extend(values)
        else:
            for n, v in zip(names, values):
                out.setdefault(n, []).append(v)
    return out


def _estimate(name):
    cond = CONDITIONS[0] if BOOK_RUNS[name].conditioned else None
    return book_runs.estimate(name, cond, quick=False)


@pytest.mark.parametrize("name", list(BOOK_RUNS))
def test_estimate_within_2x_of_measured(name):
    est = _estimate(name)
    measured = [BOOK_RUNS[name].cost] + _readme_times().get(name, [])
    for t in measured:
        if t < SHORT_S and est < SHORT_S:
            continue
        assert t / 2 <= est <= 2 * t, (name, est, t)


def test_readme_table_parsed():
    times = _readme_times()
    assert {"globenc-fig4", "alti-fig7", "cue-alignment", "decoder-blimp"} <= set(times)
    assert len(times["cue-alignment"]) == 2


def test_bert_base_costs_more_and_hta_grows_fastest():
    ratio = {n: book_runs.estimate(n, "pretrained" if BOOK_RUNS[n].conditioned else None,
                                   "bert-base-uncased", quick=False) / _estimate(n)
             for n in ("globenc-fig4", "alti-table2")}
    assert ratio["alti-table2"] > 3 and ratio["globenc-fig4"] > ratio["alti-table2"]


def test_quick_mode_is_short():
    for name, spec in BOOK_RUNS.items():
        cond = CONDITIONS[0] if spec.conditioned else None
        assert book_runs.estimate(name, cond, quick=True) < costs.ANNOUNCE_ABOVE_S, name


def test_token_table_matches_data():
    from transformers import AutoTokenizer

    from cmixlib import data, packaged_model_path

    tok = AutoTokenizer.from_pretrained(str(packaged_model_path()))
    lens = [len(tok(s)["input_ids"]) for s in data.load_sst2("dev")["sentence"]]
    count, m1, m2, _ = costs.DATA_TOKENS["sst2_dev"]
    assert count == len(lens)
    assert sum(lens) / len(lens) == pytest.approx(m1, abs=0.01)
    assert sum(x * x for x in lens) / len(lens) == pytest.approx(m2, abs=0.1)


def test_announce_prints_model_device_estimate_and_switch(capsys, monkeypatch):
    monkeypatch.delenv("CMIX_QUICK", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CMIX_MODEL", "no-such-org/no-such-model")
    est = book_runs.announce("globenc-fig4", device="cpu")
    out = capsys.readouterr().out
    assert est > costs.ANNOUNCE_ABOVE_S
    assert "globenc-fig4-hta on 256 examples" in out and "all-MiniLM-L6-v2" in out
    assert "CPU" in out and "TFLOP" in out and "CMIX_QUICK" in out
    assert "CMIX_MODEL=bert-base-uncased" in out
    assert book_runs.announce("alti-figs8-10", device="cpu") < costs.ANNOUNCE_ABOVE_S
    assert capsys.readouterr().out == ""


def test_unknown_run_or_model_refused():
    with pytest.raises(KeyError):
        costs.run_flops("no-such-run", None, {})
    with pytest.raises(KeyError):
        costs.run_flops("alti-fig3", 500, {}, "no-such-model")


def test_run_announces_only_what_it_computes(tmp_path, monkeypatch, capsys):
    """book_runs.run: an uncached run over a minute is announced before it starts, a cached
    one is not (run_experiment replaced by a stub that records its call)."""
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path))
    monkeypatch.delenv("CMIX_QUICK", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("CMIX_DEVICE", "cpu")
    calls = []
    monkeypatch.setattr(book_runs, "run_experiment",
                        lambda *a, **k: calls.append((a, k)) or "result")
    assert not book_runs.is_cached("globenc-fig4")
    assert book_runs.run("globenc-fig4") == "result"
    out = capsys.readouterr().out
    assert out.startswith("Run globenc-fig4:") and calls[0][0] == ("globenc-fig4-hta",)
    monkeypatch.setattr(book_runs, "is_cached", lambda *a, **k: True)
    book_runs.run("globenc-fig4")
    assert capsys.readouterr().out == "" and len(calls) == 2


def test_gpu_scale_uses_a_measured_matrix_product(monkeypatch):
    monkeypatch.setattr(costs, "gemm_flops", lambda device, size=768, repeats=5: 4.7e12)
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Fake GPU")
    scale, where = costs.device_scale("cuda")
    assert scale == pytest.approx(4.7e12 / costs.BUILD_GEMM_FLOPS) and "Fake GPU" in where
    assert costs.device_scale("cpu", threads=2)[0] == 2.0


@pytest.mark.slow
def test_is_cached_finds_what_run_wrote(tmp_path, monkeypatch):
    """A real book run (chapter 16's, quick mode: SmolLM2 offline) in an empty cache: not
    cached before, cached after, as run_experiment's own key says."""
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path))
    monkeypatch.setenv("CMIX_QUICK", "1")
    monkeypatch.setenv("CMIX_DEVICE", "cpu")
    assert not book_runs.is_cached("decoder-blimp")
    res = book_runs.run("decoder-blimp")
    assert not res.from_cache and book_runs.is_cached("decoder-blimp")
    assert book_runs.run("decoder-blimp").from_cache
