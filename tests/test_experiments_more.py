"""HTA maps against a slow reference, the layer-pruned student of cmixlib.training, and the
experiments `alti-fig7-consistency` / `globenc-fig4-hta` on tiny random models (as tests/test_cli.py)."""
import copy

import numpy as np
import pandas as pd
import pytest
import torch

import cmixlib
from fakes import FakeBundle
from tolerances import assert_no_worse_than_baseline
from cmixlib import cli
from cmixlib import experiments as X
from cmixlib.experiments import alti as A7
from cmixlib.metrics import statistics as st
from cmixlib import training
from cmixlib.forward.encoder import encoder_layers
from cmixlib.methods.hta import HTAError, hta


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "cache"))
    yield


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------------------
# HTA × input against torch.autograd.functional.jacobian and explicit loops
# ---------------------------------------------------------------------------------------------
def _ids(arch, n=7, seed=0):
    rng = np.random.default_rng(seed)
    first = 0 if arch == "roberta" else 1
    return torch.tensor([[first] + rng.integers(5, 100, n - 2).tolist() + [2]])


def _reference_hta(model, ids, times_input=True):
    """Slow and obvious: the full Jacobian of each layer called on its own (no mask needed for one
    unpadded sentence), then the Frobenius norm of every (i, j) block in Python loops."""
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    out = []
    for k, mods in enumerate(encoder_layers(model)):
        x = hs[k][0].detach()

        def f(z, layer=mods.layer):
            o = layer(z.unsqueeze(0))
            return (o[0] if isinstance(o, tuple) else o)[0]

        J = torch.autograd.functional.jacobian(f, x)            # (n, d, n, d)
        n = x.shape[0]
        c = np.zeros((n, n))
        for i in range(n):
            for j in range(n):
                block = J[i, :, j, :] * (x[j][None, :] if times_input else 1.0)
                c[i, j] = float(torch.linalg.matrix_norm(block, ord="fro"))
        out.append(c)
    return np.stack(out)


@pytest.mark.parametrize("arch", ["bert", "distilbert", "roberta"])
def test_hta_matches_full_jacobian_reference(arch):
    model = cmixlib.random_model(arch, task="sequence-classification", layers=2, num_labels=2, seed=3)
    model64 = cmixlib.random_model(arch, task="sequence-classification", layers=2, num_labels=2, seed=3,
                                   dtype=torch.float64)
    ids = _ids(arch)
    ref = _reference_hta(model, ids)
    ours = hta(model, None, {"input_ids": ids}, normalize=False, chunk_size=40)   # several chunks
    # rule 2: the jacobian reference on the same weights in float64 is the truth, in float32 the baseline
    assert_no_worse_than_baseline(ours, _reference_hta(model64, ids), ref, err_msg=f"HTA x input {arch}")
    # the × input matters: without it the maps are different (so the comparison above can fail)
    plain = hta(model, None, {"input_ids": ids}, normalize=False, times_input=False)
    assert_no_worse_than_baseline(plain, _reference_hta(model64, ids, times_input=False),
                                  _reference_hta(model, ids, times_input=False), err_msg=f"HTA {arch}")
    assert np.abs(plain - ours).max() > 1e-2


def test_hta_rows_layers_and_normalisation():
    model = cmixlib.random_model("bert", layers=3, seed=5)
    ids = {"input_ids": _ids("bert", n=6, seed=1)}
    full = hta(model, None, ids)
    assert full.shape == (3, 6, 6)
    np.testing.assert_allclose(full.sum(-1), 1.0, rtol=1e-10)      # hta normalises in float64
    raw = hta(model, None, ids, normalize=False)
    np.testing.assert_allclose(raw / raw.sum(-1, keepdims=True), full, rtol=1e-10)   # float64, same raw maps
    part = hta(model, None, ids, rows=[0, -1], layers=[1])
    assert np.isnan(part[0]).all() and np.isnan(part[2]).all() and np.isnan(part[1, 1:5]).all()
    # rule 2: two rows of one layer (other vmapped batches) against the same weights in float64,
    # the full float32 map the baseline
    exact = hta(cmixlib.random_model("bert", layers=3, seed=5, dtype=torch.float64), None, ids)
    assert_no_worse_than_baseline(part[1, [0, 5]], exact[1, [0, 5]], full[1, [0, 5]], err_msg="HTA rows=")


def test_hta_clear_errors():
    model = cmixlib.random_model("bert", layers=2, seed=0)
    ids = _ids("bert")
    with pytest.raises(ValueError, match="one sentence"):
        hta(model, None, {"input_ids": ids.repeat(2, 1)})
    with pytest.raises(ValueError, match="unpadded"):
        hta(model, None, {"input_ids": ids, "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0, 0]])})
    with pytest.raises(ValueError, match="out of range"):
        hta(model, None, {"input_ids": ids}, layers=[5])
    model.train()
    with pytest.raises(HTAError, match="eval"):
        hta(model, None, {"input_ids": ids})


# ---------------------------------------------------------------------------------------------
# DistilBERT-style student: keep_encoder_layers and train_classifier(keep_layers=...)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["bert", "distilbert"])
def test_keep_encoder_layers(arch):
    model = cmixlib.random_model(arch, task="sequence-classification", layers=4, num_labels=2, seed=2)
    before = [m.layer for m in encoder_layers(model)]
    ref = copy.deepcopy(model)
    assert training.keep_encoder_layers(model, [0, 2]) == [0, 2]
    assert [m.layer for m in encoder_layers(model)] == [before[0], before[2]]
    cfg = model.config
    assert (cfg.num_hidden_layers if arch == "bert" else cfg.n_layers) == 2
    ids = _ids(arch)
    ref64 = copy.deepcopy(ref).double()                   # the same weights in float64: the truth of rule 2
    with torch.no_grad():
        hs64 = ref64(input_ids=ids, output_hidden_states=True).hidden_states
        o64 = encoder_layers(ref64)[2].layer(hs64[1])
        o64 = o64[0] if isinstance(o64, tuple) else o64
        hs_ref = ref(input_ids=ids, output_hidden_states=True).hidden_states
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
        # the student's layer 2 is the teacher's layer 3 (index 2) applied to the student's layer-1 output
        layer2 = encoder_layers(ref)[2].layer
        o = layer2(hs[1])
        o = o[0] if isinstance(o, tuple) else o
    assert len(hs) == 3
    # rule 2: the student's layers against the teacher's in float64; baselines: the teacher's own
    # float32 forward (layer 1) and its layer 3 called alone on the student's layer-1 output (layer 2)
    assert_no_worse_than_baseline(hs[1], hs64[1], hs_ref[1], err_msg="student layer 1")
    assert_no_worse_than_baseline(hs[2], o64, o, err_msg="student layer 2")
    for bad in ([], [2, 1], [0, 4], [1, 1]):
        with pytest.raises(ValueError, match="keep_layers"):
            training.keep_encoder_layers(copy.deepcopy(ref), bad)


def _tiny_task_data():
    rng = np.random.default_rng(0)
    xs = [[1] + rng.integers(5, 100, 6).tolist() + [2] for _ in range(8)]
    return {"train": (xs, [i % 2 for i in range(8)]), "dev": (xs[:4], [0, 1, 0, 1]), "train_pool": 8,
            "description": "tiny"}


def test_train_classifier_keep_layers_key():
    tokenizer = lambda inputs, **kw: {"input_ids": [list(x) for x in inputs]}   # noqa: E731  (ids in, ids out)
    d = _tiny_task_data()

    def run(keep):
        model = cmixlib.random_model("bert", task="sequence-classification", layers=4, num_labels=2, seed=7)
        return training.train_classifier("sst2", bundle=(model, tokenizer), task_data=d, epochs=1, batch_size=4,
                                         progress=False, keep_layers=keep)

    (m_full, _), info_full = run(None)
    (m_half, _), info_half = run([0, 2])
    assert "keep_layers" not in info_full["settings"]                    # full-depth keys unchanged
    assert info_half["settings"]["keep_layers"] == [0, 2] and info_half["layers"] == 2
    assert info_full["cache_key"] != info_half["cache_key"]
    assert len(encoder_layers(m_half)) == 2
    (m_again, _), info_again = run([0, 2])                               # loads the pruned weights
    assert info_again["from_cache"] and info_again["cache_key"] == info_half["cache_key"]
    for a, b in zip(m_again.state_dict().values(), m_half.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)             # saved and loaded: bitwise


# ---------------------------------------------------------------------------------------------
# The two experiments on tiny random models
# ---------------------------------------------------------------------------------------------

def _examples(n, seed=1):
    rng = np.random.default_rng(seed)
    return [{"input_ids": [1] + rng.integers(5, 100, 4 + i % 3).tolist() + [2], "label": i % 2, "target_index": 0}
            for i in range(n)]


class TwoClassifiers(X.Sources):
    """Model A, model B and SST-2 stand-ins for ALTI Figure 7 / GlobEnc Figure 4 (the documented
    seam); ``calls`` records the ``model_b`` setting each run asked for."""

    def __init__(self, a, b):
        self.a, self.b, self.calls = a, b, {}

    def classifier(self, task):
        return self.a, {"accuracy": 0.5}

    def model_b(self, bundle_a):
        self.calls["model_b"] = self.spec.settings["model_b"]
        return self.b, {"accuracy": 0.5}, "student of the tiny model (test)"

    def sst2(self, bundle, limit):
        return _examples(limit or 6)

    sst2_test = sst2      # ALTI's experiments read the test split


@pytest.fixture
def fakes():
    a = FakeBundle(cmixlib.random_model("bert", task="sequence-classification", layers=2, num_labels=2, seed=2))
    student = copy.deepcopy(a.model)
    training.keep_encoder_layers(student, [0])
    return TwoClassifiers(a, FakeBundle(student))


def test_alti_fig7_on_fakes(fakes, capsys):
    r = X.run_experiment("alti-fig7-consistency", model="fake", limit=6, settings={"ig_steps": 3}, progress=False,
                         sources=fakes)
    res = r.result.set_index("method")
    assert list(res.index) == X.FIG7_METHODS
    agr = r.frames["agreement"].iloc[0]
    assert agr["n_sentences"] == 6 and 0 <= agr["n_same_prediction"] <= 6
    assert (res["n"] == agr["n_same_prediction"]).all()
    ok = res["mean"].dropna()
    assert ((ok >= -1) & (ok <= 1)).all()
    models = r.frames["models"].set_index("model")
    assert models.loc["A", "layers"] == 2 and models.loc["B", "layers"] == 1
    assert fakes.calls["model_b"] == "auto" and any("student" in n for n in r.meta["notes"])
    paired = r.frames["vs_alti"].set_index("method")
    per = r.frames["per_example"].pivot(index="example", columns="method", values="spearman")
    assert list(paired.index) == X.FIG7_METHODS[1:]
    assert paired.loc["grad_l2", "mean_diff"] == pytest.approx((per["grad_l2"] - per["alti"]).mean())
    # same model on both sides: every method is perfectly consistent with itself
    same = TwoClassifiers(fakes.a, fakes.a)
    r2 = X.run_experiment("alti-fig7-consistency", model="fake", limit=4, settings={"ig_steps": 3}, progress=False,
                          sources=same)
    assert r2.frames["agreement"].iloc[0]["agreement_rate"] == 1.0
    # the same float32 computation twice (same model, inputs and ops: bitwise the same maps), so every
    # Spearman is exactly 1; the float64 mean of ones is 1
    np.testing.assert_allclose(r2.result["mean"], 1.0, rtol=1e-15)
    assert "ig_check" not in r2.frames            # ig_check = 0 by default
    # the step check: the same model on both sides gives rho(A, B) = 1 at either step count, and
    # IG at 3 steps against itself (ig_check_steps = 3) is rho = 1
    r3 = X.run_experiment("alti-fig7-consistency", model="fake", limit=4, progress=False, sources=same,
                          settings={"ig_steps": 3, "ig_check": 2, "ig_check_steps": 3})
    chk = r3.frames["ig_check"].set_index("quantity")
    assert list(chk.index) == ["A", "B", "consistency", "consistency_ref"]
    assert (chk["n"] == 2).all() and (chk["reference_steps"] == 3).all()
    np.testing.assert_allclose(chk["mean"], 1.0, rtol=1e-12)
    # a different reference step count gives a real comparison: still a correlation
    r4 = X.run_experiment("alti-fig7-consistency", model="fake", limit=4, progress=False, sources=fakes,
                          settings={"ig_steps": 2, "ig_check": 1, "ig_check_steps": 8})
    if "ig_check" in r4.frames:                   # only if the two fakes agree on a sentence
        vals = r4.frames["ig_check"]["mean"].dropna()
        assert ((vals >= -1) & (vals <= 1)).all()
    with pytest.raises(ValueError, match="unknown method"):
        X.run_experiment("alti-fig7-consistency", model="fake", limit=2, settings={"methods": ["nope"]},
                         progress=False, sources=fakes)
    # the command line prints the run (read from the cache: same model name, limit and settings)
    assert cli.main(["run", "alti-fig7-consistency", "--model", "fake", "--limit", "4", "--set", "ig_steps=3",
                     "--quiet"]) == 0
    assert "agreement" in capsys.readouterr().out


def _rollout_cls_row(model, ids: list[int]) -> np.ndarray:
    """Attention rollout written out (Abnar & Zuidema): per layer the head mean A, then
    R = (0.5 A_L + 0.5 I) ... (0.5 A_1 + 0.5 I) in float64; the [CLS] row of R."""
    with torch.no_grad():
        att = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    n = len(ids)
    r = np.eye(n)
    for a in att:
        r = (0.5 * a[0].double().mean(0).numpy() + 0.5 * np.eye(n)) @ r
    return r[0]


def test_alti_fig7_table2_by_depth_on_fakes(fakes):
    """Frame table2_by_depth: both models with their layers, the rollout, ALTI and the controls
    against grad-L2; the rollout row equals rollout written out, and every mean equals the mean
    of Spearman's rho computed sentence by sentence from one-sentence calls (scipy)."""
    from scipy.stats import spearmanr

    from cmixlib.experiments.controls import CONTROLS, control_scores, control_seed
    from cmixlib.gradients import ClassTarget, grad_l2

    r = X.run_experiment("alti-fig7-consistency", model="fake", limit=6, settings={"ig_steps": 3},
                         progress=False, sources=fakes)
    d = r.frames["table2_by_depth"]
    assert list(d.columns) == ["method", "model", "layers", "reference", "mean", "std", "n", "n_nan"]
    assert list(d["model"].unique()) == ["A", "B"] and (d["reference"] == "grad_l2").all()
    assert dict(zip(d["model"], d["layers"])) == {"A": 2, "B": 1}
    names = [*A7.DEPTH_METHODS, *CONTROLS]
    assert all(list(d[d.model == m]["method"]) == names for m in ("A", "B"))
    same = sorted(r.frames["per_example"]["example"].unique())
    assert (d["n"] + d["n_nan"] == len(same)).all() and len(same) > 0
    examples = _examples(6)
    for role, bundle in (("A", fakes.a), ("B", fakes.b)):
        per = {m: [] for m in names}
        for k in same:
            ids = examples[k]["input_ids"]
            roll = _rollout_cls_row(bundle.model, ids)
            # the run's rollout row (its padded batch code) on this sentence and a padded batch
            batch = [examples[k], examples[(k + 1) % 6]]
            got = A7._fig7_vectors(bundle, batch, [0, 0], ["attention_rollout"], {"ig_steps": 3})
            np.testing.assert_allclose(got[0]["attention_rollout"], roll, rtol=1e-5, atol=1e-7)
            maps = cmixlib.context_mixing(bundle.model, bundle.tokenizer, {"input_ids": torch.tensor([ids])},
                                          methods=["alti"])
            ref = grad_l2(bundle.model, torch.tensor([ids]), ClassTarget(None, score="prob"))
            sc = {"attention_rollout": roll, "alti": maps["alti"][-1, 0],
                  **control_scores(len(ids), 0, control_seed(0, k))}
            for m in names:
                per[m].append(spearmanr(ref, sc[m])[0])
        want = pd.Series({m: np.nanmean(v) for m, v in per.items()})
        have = d[d.model == role].set_index("method")["mean"]
        np.testing.assert_allclose(have[names], want[names], rtol=0, atol=1e-9)


class RecordedTraining(X.Sources):
    """The default model-B policy with training replaced: records each call; DistilBERT is offline."""

    def __init__(self):
        self.calls = []

    def train_classifier(self, task, model, **kw):
        from cmixlib.models.hub import ModelLoadError

        self.calls.append((model, kw))
        if model == "distilbert-base-uncased":
            raise ModelLoadError("offline")
        return FakeBundle(cmixlib.random_model("bert", task="sequence-classification", layers=2, num_labels=2)), {}


def test_model_b_choice():
    """auto: DistilBERT only for a real bert-base-uncased, else the student (last layer kept)."""
    # brief fine-tuning of model A (quick mode's kind of settings): B is trained the same way
    settings = {**X.REGISTRY["alti-fig7-consistency"].defaults, "cls_max_train_examples": 1500,
                "cls_epochs": 2}
    recorded = RecordedTraining()

    def context(**changes):
        return X.Context(experiment="alti-fig7-consistency", model="bert-base-uncased", limit=None,
                         settings={**settings, **changes}, progress=False, sources=recorded)

    ctx = context()
    calls = recorded.calls
    a = FakeBundle(cmixlib.random_model("bert", task="sequence-classification", layers=6, num_labels=2))
    _, _, how = ctx.sources.model_b(a)                       # a stand-in, not bert-base-uncased: no DistilBERT
    assert calls[-1][0] == "bert-base-uncased" and calls[-1][1]["keep_layers"] == [1, 3, 5]
    assert calls[-1][1]["max_train_examples"] == 6000 and calls[-1][1]["epochs"] == 2 and "student" in how
    a.name, a.is_fallback = "bert-base-uncased", False       # the paper's model: try DistilBERT first
    ctx.sources.model_b(a)
    assert calls[-2][0] == "distilbert-base-uncased" and calls[-2][1]["allow_fallback"] is False
    assert calls[-1][1]["keep_layers"] == [1, 3, 5] and any("could not be loaded" in n for n in ctx.notes)
    ctx = context(model_b="student", keep_layers=[0, 2], b_cls_max_train_examples=None)
    ctx.sources.model_b(a)
    assert calls[-1][1]["keep_layers"] == [0, 2] and calls[-1][1]["max_train_examples"] == 1500
    ctx = context(model_b="some/model")                       # any other value: that model, no fallback
    assert ctx.sources.model_b(a)[2] == "some/model" and calls[-1][0] == "some/model"
    assert calls[-1][1]["allow_fallback"] is False


def test_map_agreement_definition():
    rng = np.random.default_rng(0)
    m = rng.uniform(size=(5, 5))
    assert st.map_agreement(m, m) == pytest.approx(1.0)
    # a row correlation ignores row scaling (row normalisation does not matter), a map one does not
    scaled = m * np.arange(1, 6)[:, None]
    assert st.map_agreement(scaled, m) == pytest.approx(1.0)
    assert st.map_agreement(scaled, m, unit="map") < 0.99
    expected = np.mean([np.corrcoef(m[i], m[i] ** 2)[0, 1] for i in range(5)])
    assert st.map_agreement(m, m ** 2) == pytest.approx(expected)
    with pytest.raises(ValueError, match="correlation"):
        st.map_agreement(m, m, correlation="kendall")
    # without the diagonal: only the off-diagonal entries of each row are correlated
    r = rng.uniform(size=(5, 5))
    off = np.mean([np.corrcoef(np.delete(m[i], i), np.delete(r[i], i))[0, 1] for i in range(5)])
    assert st.map_agreement(m, r, diagonal=False) == pytest.approx(off)
    mask = ~np.eye(5, dtype=bool)
    assert st.map_agreement(m, r, unit="map", diagonal=False) == pytest.approx(np.corrcoef(m[mask], r[mask])[0, 1])
    # the rows at once equal the one-row correlation: Spearman too, a constant row is skipped, a
    # row with a NaN drops that entry (as the one-row function)
    from scipy.stats import spearmanr
    rho = np.mean([spearmanr(m[i], r[i]).statistic for i in range(5)])
    assert st.map_agreement(m, r, correlation="spearman") == pytest.approx(rho, abs=1e-12)
    c, d = m.copy(), r.copy()
    c[2] = 0.5
    d[3, 1] = np.nan
    rows = [np.corrcoef(m[i], r[i])[0, 1] for i in (0, 1, 4)]
    rows.append(np.corrcoef(np.delete(m[3], 1), np.delete(r[3], 1))[0, 1])
    assert st.map_agreement(c, d) == pytest.approx(np.mean(rows), abs=1e-12)


def test_globenc_fig4_on_fakes(fakes, capsys):
    r = X.run_experiment("globenc-fig4-hta", model="fake", limit=3, settings={"max_tokens": 7}, progress=False,
                         sources=fakes)
    res = r.result
    assert set(res.method) == set(X.FIG4_METHODS) and set(res.layer) == {1, 2}
    assert set(res["variant"]) == set(X.FIG4_VARIANTS) and len(res) == 3 * 3 * 2
    assert (res["n"] == 3).all() and (res["confidence"] == 0.99).all()
    assert ((res["ci_low"] <= res["mean"]) & (res["mean"] <= res["ci_high"])).all()
    assert ((res["mean"] >= -1) & (res["mean"] <= 1)).all()
    per = r.frames["per_example"]
    assert (per["n_tokens"] <= 7).all() and len(per) == 3 * 2 * 3 * 3
    rows = per[per.variant == "rows"]
    assert ((rows.value >= -1) & (rows.value <= 1)).all()
    # the whole-map variant uses the raw (un-normalised) maps: recompute its values by hand (np.corrcoef
    # of the flattened maps) from the float32 model (the baseline) and the same weights in float64 (the truth)
    def by_hand(model):
        out = []
        for ex in [e for e in _examples(6) if len(e["input_ids"]) <= 7][:3]:    # the experiment's sentences
            ids = {"input_ids": torch.tensor([ex["input_ids"]])}
            raw_h = hta(model, None, ids, normalize=False)
            raw_m = cmixlib.context_mixing(model, None, ids, methods=X.FIG4_METHODS, normalize=False)
            out.append([[np.corrcoef(raw_h[layer].ravel(), raw_m[m][layer].ravel())[0, 1] for layer in (0, 1)]
                        for m in X.FIG4_METHODS])
        return np.array(out)

    raw = per[per.variant == "map_raw"].set_index(["example", "method", "layer"])["value"]
    got = [[[raw[(k, m, layer)] for layer in (1, 2)] for m in X.FIG4_METHODS] for k in range(3)]
    # rule 2 on all 3 x 3 x 2 correlations (a correlation is a smooth function of the maps: no ranks)
    assert_no_worse_than_baseline(got, by_hand(copy.deepcopy(fakes.a.model).double()), by_hand(fakes.a.model),
                                  err_msg="map_raw correlations")
    assert len(r.meta["info"]["hta_seconds_per_sentence"]) == 3
    with pytest.raises(ValueError, match="correlation"):
        X.run_experiment("globenc-fig4-hta", model="fake", limit=1, settings={"correlation": "kendall"},
                         progress=False, sources=fakes)
    # the command line prints the run (read from the cache: same model name, limit and settings)
    assert cli.main(["run", "globenc-fig4-hta", "--model", "fake", "--limit", "3", "--set", "max_tokens=7",
                     "--quiet"]) == 0
    assert "HTA" in capsys.readouterr().out


def test_mean_ci_is_a_t_interval():
    from scipy import stats

    v = [0.1, 0.4, 0.35, 0.2]
    out = st.mean_ci(v + [float("nan")], 0.99)
    lo, hi = stats.t.interval(0.99, 3, loc=np.mean(v), scale=stats.sem(v))
    assert out["n"] == 4 and out["ci_low"] == pytest.approx(lo) and out["ci_high"] == pytest.approx(hi)
    assert np.isnan(st.mean_ci([0.3], 0.99)["ci_low"])


def test_new_plotting_helpers():
    import matplotlib

    matplotlib.use("Agg")
    from cmixlib.plotting import plot_consistency_bars, plot_layer_correlations

    df = pd.DataFrame({"method": X.FIG7_METHODS, "mean": [0.8, 0.6, 0.4, 0.3], "ci_low": [0.7, 0.5, 0.3, 0.2],
                       "ci_high": [0.9, 0.7, 0.5, 0.4]})
    ax = plot_consistency_bars(df)
    assert len(ax.patches) == 4
    lay = pd.DataFrame([{"method": m, "layer": k, "mean": 0.1 * k, "ci_low": 0.1 * k - 0.05, "ci_high": 0.1 * k + 0.05}
                        for m in X.FIG4_METHODS for k in (1, 2, 3)])
    ax = plot_layer_correlations(lay)
    assert len(ax.lines) == 3 and len(ax.collections) == 3
