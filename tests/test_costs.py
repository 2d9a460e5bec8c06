"""The cost model (cmixlib.costs) against this build's measured run times."""
import re
from pathlib import Path

import pytest

from cmixlib import costs
from cmixlib.book_runs import BOOK_RUNS, CONDITIONS

README = Path(__file__).resolve().parents[1] / "README.md"
#: Runs this short are dominated by what the FLOP model leaves out (loading models and data,
#: probe fits); for them the estimate must only stay below the announcement threshold.
SHORT_S = 30.0


def _readme_times() -> dict[str, list[float]]:
    """Run name -> seconds in the README's newest column ("a / b" rows split by name)."""
    out: dict[str, list[float]] = {}
    text = README.read_text()
    for line in text.split("| run (book_runs) |", 1)[1].splitlines()[2:]:
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
    return costs.estimate_seconds(name, cond, quick=False)


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
    ratio = {n: costs.estimate_seconds(n, "pretrained" if BOOK_RUNS[n].conditioned else None,
                                       "bert-base-uncased", quick=False) / _estimate(n)
             for n in ("globenc-fig4", "alti-table2")}
    assert ratio["alti-table2"] > 3 and ratio["globenc-fig4"] > ratio["alti-table2"]


def test_quick_mode_is_short():
    for name, spec in BOOK_RUNS.items():
        cond = CONDITIONS[0] if spec.conditioned else None
        assert costs.estimate_seconds(name, cond, quick=True) < costs.ANNOUNCE_ABOVE_S, name


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
    est = costs.announce_run("globenc-fig4", device="cpu")
    out = capsys.readouterr().out
    assert est > costs.ANNOUNCE_ABOVE_S
    assert "globenc-fig4-hta on 256 examples" in out and "all-MiniLM-L6-v2" in out
    assert "CPU" in out and "TFLOP" in out and "CMIX_QUICK" in out
    assert "CMIX_MODEL=bert-base-uncased" in out
    assert costs.announce_run("alti-figs8-10", device="cpu") < costs.ANNOUNCE_ABOVE_S
    assert capsys.readouterr().out == ""


def test_unknown_run_refused():
    with pytest.raises(KeyError):
        costs.run_flops("no-such-run")
