"""The `cmix` command, the experiment cache and result files; experiments run on tiny fakes."""
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import cmixlib
from fakes import BundleSources, FakeBundle
from cmixlib import cli
from cmixlib import experiments as X
from cmixlib.data import paper_numbers as pn

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"  # beside the clone, where present


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "cache"))
    yield


@pytest.fixture
def fake_experiment():
    calls = {"n": 0}

    @X.register("fake-tiny", title="A fake experiment", paper="none", defaults={"alpha": 1, "beta": "x"},
                paper_numbers=lambda: pd.DataFrame({"method": ["m"], "value": [0.5], "std": [np.nan],
                                                    "model": ["paper-model"], "source": ["fake source"]}),
                compare=lambda frames, paper: X.comparison_table(frames["result"], paper, ["method"]))
    def fake(ctx):
        calls["n"] += 1
        ctx.info["model_description"] = f"fake model {ctx.model}"
        ctx.info["data_size"] = ctx.limit or 10
        ctx.note("a note")
        return {"result": pd.DataFrame({"method": ["m"], "mean": [ctx.settings["alpha"] / 10], "n": [ctx.limit or 10]}),
                "extra": pd.DataFrame({"x": [1, 2]})}

    yield calls
    X.REGISTRY.pop("fake-tiny", None)


def test_cmix_list_names_every_experiment(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ["globenc-fig5-ln-outliers", "alti-fig6-special-ranks", "vz-cue-alignment", "vz-mdl-probing",
                 "vz-faithfulness", "alti-table2", "globenc-correlations"]:
        assert name in out


def test_cache_hit_and_miss(fake_experiment):
    r1 = X.run_experiment("fake-tiny", model="m1", limit=3, progress=False)
    assert not r1.from_cache and fake_experiment["n"] == 1
    r2 = X.run_experiment("fake-tiny", model="m1", limit=3, progress=False)
    assert r2.from_cache and fake_experiment["n"] == 1
    pd.testing.assert_frame_equal(r1.result, r2.result)
    # a changed setting, limit or model recomputes
    X.run_experiment("fake-tiny", model="m1", limit=3, settings={"alpha": 2}, progress=False)
    assert fake_experiment["n"] == 2
    X.run_experiment("fake-tiny", model="m1", limit=4, progress=False)
    assert fake_experiment["n"] == 3
    X.run_experiment("fake-tiny", model="m2", limit=3, progress=False)
    assert fake_experiment["n"] == 4
    # setting equal to the default = same key
    X.run_experiment("fake-tiny", model="m1", limit=3, settings={"alpha": 1}, progress=False)
    assert fake_experiment["n"] == 4
    X.run_experiment("fake-tiny", model="m1", limit=3, use_cache=False, progress=False)
    assert fake_experiment["n"] == 5


def test_code_version_enters_the_key():
    k1 = X.cache_key("e", "m", 1, {"a": 1}, "v1")
    assert k1 == X.cache_key("e", "m", 1, {"a": 1}, "v1")
    assert k1 != X.cache_key("e", "m", 1, {"a": 1}, "v2")
    assert re.fullmatch(r"[0-9a-f]{12}", X.code_version())


def _cmixlib_imports(source: str, rel: Path) -> set[str]:
    """The top-level modules or sub-packages of cmixlib (as in PRESENTATION_MODULES) that the
    module at ``rel`` (path relative to the package) imports anything from: ``from X import Y``
    (Y may be a module, X relative or absolute) or ``import cmixlib.X``."""
    import ast

    here = list(rel.parent.parts)
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            mod = [p for p in (node.module or "").split(".") if p]
            if node.level:
                base = here[:len(here) - node.level + 1]
            elif mod[:1] == ["cmixlib"]:
                base, mod = [], mod[1:]
            else:
                continue
            targets = [base + mod] + [base + mod + [a.name] for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".")[1:] for a in node.names if a.name.split(".")[0] == "cmixlib"]
        else:
            continue
        found |= {t[0] for t in targets if t}
    return found


def test_no_computing_module_imports_a_presentation_module():
    """Presentation modules are left out of the code version only because no computing module
    (at any depth of the package) imports them."""
    from cmixlib.cache import source_files

    pkg = Path(cmixlib.__file__).resolve().parent
    left_out = X.presentation_files()
    assert {"plotting/maps.py", "plotting/diagrams.py", "cli.py"} <= left_out
    assert "experiments/runner.py" not in left_out
    for path in source_files(exclude=left_out):
        used = _cmixlib_imports(path.read_text(), path.relative_to(pkg)) & X.PRESENTATION_MODULES
        assert not used, f"{path.relative_to(pkg)} imports {used}: remove it from PRESENTATION_MODULES"
    # the check sees every way of writing such an import
    for line in ["from .. import plotting", "from ..plotting import plot_maps", "from ..book.runs import x",
                 "from cmixlib.plotting import x", "import cmixlib.plotting", "from cmixlib import plotting"]:
        assert _cmixlib_imports(line, Path("experiments/probe.py")) & {"plotting", "book"}, line
    assert _cmixlib_imports("from .plotting import x", Path("validation.py")) == {"plotting"}
    assert _cmixlib_imports("from . import plotting", Path("experiments/probe.py")) == {"experiments"}


def test_code_version_covers_every_module_that_can_change_a_result(tmp_path):
    """Editing the code of any computing module, at any depth of the package, changes the code
    version; a presentation module, a comment or a docstring does not. Run on a copy of the
    package, imported in a fresh process."""
    import shutil
    import subprocess
    import sys

    pkg = Path(cmixlib.__file__).resolve().parent
    shutil.copytree(pkg, tmp_path / "cmixlib", ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    script = """
import sys
from pathlib import Path
import cmixlib
from cmixlib.experiments import code_version
pkg = Path(cmixlib.__file__).resolve().parent
assert str(pkg).startswith(sys.argv[1]), pkg
versions = [code_version()]
norms = (pkg / "methods/norms.py").read_text()
q = chr(34) * 3
(pkg / "methods/norms.py").write_text(norms.replace(q, q + "Docs only. ", 1) + "\\n# a comment\\n")
docs_only = code_version()
for rel in ["plotting/maps.py", "methods/norms.py", "experiments/common.py"]:
    (pkg / rel).write_text((pkg / rel).read_text() + "\\nAN_EDIT = 1\\n")
    versions.append(code_version())
manifest = pkg / "assets/minilm_mlm/manifest.json"
manifest.write_text(manifest.read_text() + "\\n")
versions.append(code_version())
print(versions[1] == versions[0] == docs_only, len(set(versions[1:])) == 4)
"""
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=tmp_path, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_result_file_format(fake_experiment, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", "fake-tiny", "--model", "m1", "--limit", "5", "--set", "alpha=3",
                     "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "fake model m1" in printed and "data size: 5" in printed and "paper" in printed
    names = sorted(p.name for p in out.iterdir())
    assert names == ["fake-tiny.extra.csv", "fake-tiny.meta.json", "fake-tiny.paper.csv", "fake-tiny.result.csv"]
    meta = json.loads((out / "fake-tiny.meta.json").read_text())
    for key in ["experiment", "model", "model_requested", "data_size", "limit", "settings", "wall_time_s",
                "code_version", "cache_key", "created", "frames", "notes", "paper_numbers"]:
        assert key in meta
    assert meta["settings"] == {"alpha": 3, "beta": "x"} and meta["data_size"] == 5
    assert meta["model"] == "fake model m1" and meta["notes"] == ["a note"]
    assert meta["paper_numbers"] == ["fake source"]
    res = pd.read_csv(out / "fake-tiny.result.csv")
    assert res["mean"].iloc[0] == pytest.approx(0.3)


def test_bad_names_and_settings(fake_experiment, capsys):
    assert cli.main(["run", "no-such-experiment", "--quiet"]) == 2
    assert cli.main(["run", "fake-tiny", "--set", "gamma=1", "--quiet"]) == 2
    with pytest.raises(ValueError):
        X.run_experiment("fake-tiny", settings={"gamma": 1})


def test_parse_set_json_values():
    assert cli._parse_set(["a=1", "b=[\"x\", \"y\"]", "c=special", "d=null"]) == {
        "a": 1, "b": ["x", "y"], "c": "special", "d": None}


# ---------------------------------------------------------------------------------------------
# Paper numbers: tidy, labelled, and spot-checked against the seed texts
# ---------------------------------------------------------------------------------------------
def test_paper_numbers_are_tidy_and_sourced():
    df = pn.all_numbers()
    assert list(df.columns) == pn.COLUMNS
    assert df["source"].notna().all() and df["value"].notna().all()
    t2 = pn.vz_table2().set_index(["method", "condition"])["value"]
    assert t2[("Value Zeroing", "pre-trained")] == 0.65 and t2[("DL", "fine-tuned")] == -1.00
    t1 = pn.globenc_table1()
    row = t1[(t1.table == "Table 1") & (t1.method == "N-Enc") & (t1.task == "MNLI")].iloc[0]
    assert (row.value, row["std"]) == (0.78, 0.09)


@pytest.mark.skipif(not SEEDS.exists(), reason="seed texts not available")
def test_paper_numbers_match_seed_texts():
    ge = (SEEDS / "004_70eb0824793a5e5d.txt").read_text()
    pairs = [(float(a), float(b)) for a, b in
             re.findall(r"<math>\s*([+\-]?[0-9]*\.[0-9]+)\s*\\pm\s*([0-9]*\.[0-9]+)\s*</math>", ge)]
    t1, t2 = pn.globenc_table1(), pn.globenc_table2()
    ours = (list(zip(t1[t1.table == "Table 1"].value, t1[t1.table == "Table 1"]["std"])) + list(zip(t2.value, t2["std"]))
            + list(zip(t1[t1.table == "Table A.1"].value, t1[t1.table == "Table A.1"]["std"]))
            + list(zip(t1[t1.table == "Table A.2"].value, t1[t1.table == "Table A.2"]["std"])))
    assert ours == pairs
    vz = (SEEDS / "000_fe783fb7abf3a85b.txt").read_text()
    blocks = re.findall(r"Method\t\$\\rho\^\{\\text\{PT\}\}\$\t\$\\rho\^\{\\text\{FT\}\}\$\n(.*?)\n\n", vz, re.S)
    for blk, fn in zip(blocks, [pn.vz_table2, pn.vz_table3]):
        seed = [tuple(float(x) for x in re.findall(r"-?\d+\.\d+", line)[-2:]) for line in blk.strip().split("\n")]
        d = fn()
        assert list(zip(d.value[::2], d.value[1::2])) == seed
    alti = (SEEDS / "001_c0619d2968849a22.txt").read_text()
    i = alti.index("Attn Rollout\t0.23")
    seed = [(float(a), float(b)) for a, b in re.findall(r"(-?\d+\.\d+) \\pm (\d+\.\d+)", alti[i:i + 600])][:18]
    d = pn.alti_table2()
    assert list(zip(d.value, d["std"])) == seed


# ---------------------------------------------------------------------------------------------
# The real experiments, on a tiny random model and fake examples
# ---------------------------------------------------------------------------------------------

def _examples(n=8, length=8, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = [1] + rng.integers(5, 100, length - 2).tolist() + [2]
        out.append({"input_ids": ids, "target_index": 3, "target_id": 10, "foil_id": 11, "cue_indices": [1],
                    "label": "plural" if i % 2 else "singular", "tokens": ["[CLS]"] + ["w", "."] * ((length - 2) // 2) + ["[SEP]"]})
    return out


class FakeSources(BundleSources):
    """Tiny random models and fake examples in place of the real ones (the documented seam)."""

    def __init__(self):
        self.mlm_bundle = FakeBundle(cmixlib.random_model("bert", task="mlm", layers=2, seed=1))
        self.cls_bundle = FakeBundle(cmixlib.random_model("bert", task="sequence-classification", layers=2,
                                                          seed=2, num_labels=2))
        self.base_bundle = FakeBundle(cmixlib.random_model("bert", layers=3, seed=3))

    def blimp(self, bundle, limit):
        return _examples(limit or 8)

    def sst2(self, bundle, limit):
        return [dict(e, target_index=0, label=i % 2) for i, e in enumerate(_examples(limit or 4, seed=1))]

    sst2_test = sst2      # ALTI's experiments read the test split

    def sva(self, bundle, limit):
        return _examples(limit or 4, seed=2)

    def classification_inputs(self, bundle, task, limit):
        return [dict(e, target_index=0, label=i % 2) for i, e in enumerate(_examples(limit or 4, seed=3))]


@pytest.fixture
def fakes():
    return FakeSources()


FAST = {"ig_steps": 3}


def test_vz_cue_alignment_runs_on_fakes(fakes):
    r = X.run_experiment("vz-cue-alignment", model="fake", limit=2, settings=FAST, progress=False, sources=fakes)
    df = r.result
    assert set(df.method) == set(X.VZ_LAYER_METHODS)
    assert set(df.metric) == {"dot", "ap", "probes_needed"} and set(df.layer) == {0, 1}
    dot = df[df.metric == "dot"]["mean"]
    assert ((dot >= 0) & (dot <= 1)).all()
    assert r.meta["data_size"] == 2 and "random tiny bert" in r.meta["model"]


def test_vz_mdl_and_table2_on_fakes(fakes):
    r = X.run_experiment("vz-mdl-probing", model="fake", limit=8, settings={**FAST, "probe_hidden": 0},
                         progress=False, sources=fakes)
    comp = r.frames["compression"]
    assert list(comp.layer) == [0, 1, 2] and (comp.compression > 0).all()
    seeds = r.frames["compression_seeds"]                # seed 0 (= "compression") and 1, 2, 3
    assert list(seeds.columns) == ["condition", "layer", "seed", "compression"]
    assert sorted(seeds.seed.unique()) == [0, 1, 2, 3] and len(seeds) == 4 * 3
    assert list(seeds[seeds.seed == 0].compression) == list(comp.compression)
    assert seeds.groupby("layer").compression.std().gt(0).any()   # the seeds differ
    assert set(r.result.method) == set(X.VZ_LAYER_METHODS)
    c = r.comparison()
    assert {"ours", "paper", "paper_method"} <= set(c.columns)
    assert (c.dropna(subset=["paper"]).paper_model == "bert-base-uncased").all()


def test_vz_faithfulness_on_fakes(fakes):
    r = X.run_experiment("vz-faithfulness", model="fake", limit=3, settings=FAST,
                         progress=False, sources=fakes)
    assert set(r.result.method) == set(X.VZ_GLOBAL_METHODS) | {"nearness"}   # + sanity floor
    assert r.result["n"].max() <= 3
    # the "exclusion" frame re-correlates the same scores: equal to a separate run per mode
    alone = X.run_experiment("vz-faithfulness", model="fake", limit=3, progress=False, sources=fakes,
                             settings={**FAST, "exclude": "target", "also_exclude": []})
    ex = r.frames["exclusion"]
    assert set(ex["exclude"]) == {"special+target", "target"}
    got = ex[ex["exclude"] == "target"].set_index("method")["mean"]
    want = alone.result.set_index("method")["mean"]
    # both from the same float32 computation (same model, batches and ops: bitwise the same scores), then
    # Spearman and means in float64: float64 tolerances (no float32 rank can flip between the two)
    np.testing.assert_allclose(got[want.index].to_numpy(), want.to_numpy(), equal_nan=True)
    main = ex[ex["exclude"] == "special+target"].set_index("method")["mean"]
    np.testing.assert_allclose(main[want.index].to_numpy(),
                               r.result.set_index("method")["mean"][want.index].to_numpy(),
                               equal_nan=True)


def test_nearness_is_minus_the_distance_to_the_target(fakes):
    from cmixlib.experiments.common import target_rows_batch

    exs = _examples(3)
    rows = target_rows_batch(fakes.mlm_bundle, exs, ["nearness", "random"], {}, level="input",
                             seeds=[0, 1, 2])
    for ex, r in zip(exs, rows):
        n, t = len(ex["input_ids"]), int(ex["target_index"])
        np.testing.assert_array_equal(r["nearness"], [-abs(j - t) for j in range(n)])
    lay = target_rows_batch(fakes.mlm_bundle, exs[:1], ["nearness"], {}, level="layers",
                            seeds=[0])[0]["nearness"]
    assert lay.shape == (2, len(exs[0]["input_ids"])) and (lay == rows[0]["nearness"]).all()


def test_model_only_and_cls_experiments_on_fakes(fakes):
    r = X.run_experiment("globenc-fig5-ln-outliers", model="fake", progress=False, sources=fakes)
    assert list(r.result.layer) == [1, 2, 3]
    r = X.run_experiment("alti-fig6-special-ranks", model="fake", limit=2, progress=False, sources=fakes)
    vals = r.result.set_index("method")["mean"]
    assert ((vals > 0) & (vals <= 1)).all() and "grad_l2" in vals.index
    r = X.run_experiment("globenc-correlations", model="fake", limit=3, progress=False, sources=fakes)
    assert set(r.result.aggregation) == {"rollout", "individual"} and set(r.result.layer) == {1, 2}
    assert r.comparison() is not None
    r = X.run_experiment("alti-table2", model="fake", limit=2, progress=False, sources=fakes)
    assert set(r.result.task) == {"SST-2", "SVA"}
    # the "special" frame holds both variants; "dropped" equals a run with include_special=False
    r2 = X.run_experiment("alti-table2", model="fake", limit=2, progress=False, sources=fakes,
                          settings={"include_special": False})
    sp = r.frames["special"].set_index(["special", "task", "method"])["mean"]
    # the same float32 scores (same computation, bitwise) re-correlated in float64: float64 tolerance
    for keep, res in [("kept", r), ("dropped", r2)]:
        want = res.result.set_index(["task", "method"])["mean"]
        np.testing.assert_allclose(sp[keep][want.index].to_numpy(), want.to_numpy(), equal_nan=True)
    # per_example: each sentence's rho of the chosen variant; their mean is the result's mean
    per = r.frames["per_example"]
    assert set(per.task) == {"SST-2", "SVA"} and per.groupby(["task", "method"]).size().eq(2).all()
    got = per.groupby(["task", "method"])["rho"].mean()
    want = r.result.set_index(["task", "method"])["mean"]
    np.testing.assert_allclose(got[want.index].to_numpy(), want.to_numpy(), equal_nan=True)


def test_target_rows_of_a_padded_batch_equal_single_examples():
    """The experiments batch examples of different lengths: every method's target row must equal
    the one-example computation (same seeds for the random baseline)."""
    bundle = FakeBundle(cmixlib.random_model("bert", task="mlm", layers=2, seed=1, dtype=torch.float64))
    exs = [dict(e, target_index=2) for e in _examples(1, length=6, seed=5) + _examples(1, length=9, seed=6)
           + _examples(1, length=4, seed=7)]
    settings = {"grad_score": "prob", "grad_aggregate": "l2", "ig_steps": 4}
    for level, methods in (("layers", X.VZ_LAYER_METHODS), ("input", X.VZ_GLOBAL_METHODS)):
        batch = X.target_rows_batch(bundle, exs, methods, settings, level=level, seeds=[10, 11, 12])
        for ex, got, seed in zip(exs, batch, [10, 11, 12]):
            want = X.target_rows(bundle, ex, methods, settings, level=level, seed=seed)
            for m in methods:
                assert got[m].shape[-1] == len(ex["input_ids"])
                np.testing.assert_allclose(got[m], want[m], rtol=1e-9, atol=1e-12, err_msg=f"{m} {level}")  # float64


def test_cls_rows_of_a_padded_batch_equal_the_slow_single_sentence_forms():
    """ALTI Table 2 / Figure 6 batch sentences: each [CLS] row must equal the one-sentence
    computation with the plain library calls (context_mixing + rollout, attribute)."""
    from cmixlib.methods.aggregation import rollout
    from cmixlib.gradients import ClassTarget, attribute

    model = cmixlib.random_model("bert", task="sequence-classification", layers=2, seed=2,
                                 num_labels=2, dtype=torch.float64)
    bundle = FakeBundle(model)
    exs = [dict(e, target_index=0) for e in _examples(1, length=7, seed=1)
           + _examples(1, length=10, seed=2) + _examples(1, length=5, seed=3)]
    methods = ["attention", "attention_rollout", "rollout:attn_norm_res_ln", "alti", "grad_l2"]
    batch = X.cls_rows_batch(bundle, exs, methods)
    for ex, got in zip(exs, batch):
        ids = torch.tensor([ex["input_ids"]])
        maps = cmixlib.context_mixing(model, bundle.tokenizer, {"input_ids": ids},
                                      methods=["attention", "attention_rollout",
                                               "attn_norm_res_ln", "alti"])
        want = {"attention": maps["attention"][-1, 0],
                "attention_rollout": maps["attention_rollout"][-1, 0],
                "rollout:attn_norm_res_ln": rollout(maps["attn_norm_res_ln"], add_identity=False)[-1, 0],
                "alti": maps["alti"][-1, 0],
                "grad_l2": attribute(model, ids, ClassTarget(None, score="prob"),
                                     method="grad_l2")}
        for m in methods:
            np.testing.assert_allclose(got[m], want[m], rtol=1e-9, atol=1e-12, err_msg=m)   # float64


def test_vz_distance_ablation_on_fakes(fakes):
    r = X.run_experiment("vz-distance-ablation", model="fake", limit=3, progress=False, sources=fakes)
    df = r.result
    assert set(df.variant) == set(X.VZ_DISTANCE_VARIANTS) and set(df.layer) == {0, 1}
    agree = r.frames["agreement"].set_index(["variant", "layer"])["spearman"]
    assert np.allclose(agree.loc["cosine"], 1.0)       # the cosine row against itself (the same array): exact
    # the variants are different maps (a variant silently falling back to cosine would fail)
    assert not np.allclose(agree.loc["euclidean"], 1.0) or not np.allclose(agree.loc["spearman"], 1.0)
    with pytest.raises(ValueError, match="Unknown variant"):
        X.run_experiment("vz-distance-ablation", model="fake", limit=2, settings={"variants": ["manhattan"]},
                         progress=False, sources=fakes)


def test_length_batches_sort_stably_by_length():
    from cmixlib.forward.batching import length_batches, pad_sequences

    lengths = [5, 3, 5, 1, 3, 9, 3]
    assert length_batches(lengths, size=3) == [[3, 1, 4], [6, 0, 2], [5]]
    assert sorted(sum(length_batches(lengths, 32), [])) == list(range(len(lengths)))
    assert length_batches([], 4) == []
    ids, mask = pad_sequences([[7, 8, 9], [5]], pad_id=0)
    assert ids.tolist() == [[7, 8, 9], [5, 0, 0]] and mask.tolist() == [[1, 1, 1], [1, 0, 0]]


def test_declared_inputs_are_listed_and_loaded_through_the_sources(fakes):
    needs = X.list_experiments().set_index("name")["needs"]
    assert needs["vz-cue-alignment"] == "MLM by condition, BLiMP agreement"
    assert needs["alti-table2"] == "sst2: sst2 classifier, SST-2 test; sva: pretrained MLM, SVA"
    ctx = X.Context(experiment="vz-cue-alignment", model="fake", limit=5, settings={"condition": "finetuned"},
                    progress=False, sources=fakes, inputs=X.REGISTRY["vz-cue-alignment"].inputs)
    bundle, info, examples = ctx.load_inputs()
    assert bundle is fakes.mlm_bundle and len(examples) == 5 and ctx.info["data_size"] == 5
    assert ctx.info["model_description"].endswith("accuracy 0.500")
    with pytest.raises(ValueError, match="condition"):
        X.Context(experiment="alti-fig6-special-ranks", model="fake", limit=5, settings={"condition": "x"},
                  sources=fakes, inputs=X.REGISTRY["alti-fig6-special-ranks"].inputs).load_inputs()


@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_globenc_batched_rows_equal_one_example_at_a_time(family):
    """GlobEnc Table 1 / Figure 3 rows of a padded batch against a slow, obvious computation:
    per example, the true class's gradient x input saliency at the embedding output (torch
    autograd on hidden_states[0]) and scipy's Spearman against each [CLS] row, both rollouts."""
    from scipy.stats import spearmanr

    from cmixlib.methods.aggregation import normalize_rows, rollout
    from cmixlib.experiments.globenc import GLOBENC_METHODS, correlation_rows

    model = cmixlib.random_model(family, task="sequence-classification", layers=2, seed=3,
                                 dtype=torch.float64, num_labels=3)
    bundle = FakeBundle(model)
    exs = [dict(e, label=k % 3) for k, e in enumerate(_examples(1, 7, 1) + _examples(1, 10, 2)
                                                      + _examples(1, 5, 3))]
    got = correlation_rows(bundle, exs, GLOBENC_METHODS, "layers")
    for ex, rho in zip(exs, got):
        ids = torch.tensor([ex["input_ids"]])
        emb = {}
        h = cmixlib.models.arch.embedding_output_module(model).register_forward_hook(
            lambda mod, args, out: emb.update(e=out))
        try:
            with torch.enable_grad():
                logits = model(input_ids=ids).logits
                e = emb["e"]
                (g,) = torch.autograd.grad(logits[0, ex["label"]], e)
        finally:
            h.remove()
        sal = (g * e).detach()[0].norm(dim=-1).numpy()
        maps = cmixlib.context_mixing(model, None, {"input_ids": ids}, methods=GLOBENC_METHODS,
                                      normalize=False)
        for m in GLOBENC_METHODS:
            for variant, r in [("raw", rollout(maps[m], False, normalize=False)),
                               ("row-normalised", rollout(normalize_rows(maps[m]), False))]:
                want = [spearmanr(r[k, 0], sal).statistic for k in range(r.shape[0])]
                np.testing.assert_allclose(rho[(variant, m, "rollout")], want, atol=1e-9)
                single = [spearmanr(maps[m][k, 0], sal).statistic for k in range(r.shape[0])]
                np.testing.assert_allclose(rho[(variant, m, "individual")], single, atol=1e-9)
