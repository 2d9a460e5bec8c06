"""Every method and experiment runs on the model's device (issue 14, item 4).

Two kinds of tests:

* **CPU, always.** On a machine without a GPU a tensor left on the CPU while the model sits on
  CUDA goes unnoticed. :class:`device_guard.HostTracker` stands in for the GPU: it marks every
  tensor built without an explicit ``device`` as a host tensor and fails the op that mixes one
  with a tensor on the model's device, which is exactly what raises on CUDA. The methods, the
  gradient attributions, HTA, the trainers and every registered experiment (on tiny random
  models) run under it. Plus the ``device`` option: ``$CMIX_DEVICE``, ``use_device``,
  ``run_experiment(device=...)``, ``cmix run --device``, the book's setup.
* **CUDA, skipped without a GPU.** The same computations on CUDA against the CPU in float64.
  Tolerances: the methods on CUDA in float32 against the same weights on the CPU in float64, by
  rule 2 of ``tests/tolerances.py``: no more than 4x the error of the same float32 computation on
  the CPU (a wrong device path or a silently different algorithm is off by far more); the
  experiments run on CUDA in float64 against CPU float64 with ``atol=1e-8`` (their outputs go
  through ranks and correlations, where float32 rounding could swap two near-equal scores, so
  they check the device path, and the float32 test checks precision).
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pandas as pd
import pytest
import torch

import cmixlib
from cmixlib import cli
from cmixlib import experiments as X
from cmixlib import gradients as G
from cmixlib.models import devices as models
from cmixlib import training
from cmixlib.forward.encoder import encoder_layers, iter_sentences, layer_states, run_and_capture
from cmixlib.methods.hta import hta
from cmixlib.methods.value_zeroing import value_zeroing_layer
from device_guard import HostTracker
from fakes import TOK, BundleSources, FakeBundle, rationale_posts
from test_decoder_experiments import ToySources
from tolerances import assert_no_worse_than_baseline

FAMILIES = ("bert", "roberta", "electra", "distilbert")
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(models.DEVICE_ENV_VAR, raising=False)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _ids(arch: str, n: int = 7, seed: int = 0) -> list[int]:
    rng = np.random.default_rng(seed)
    first = 0 if arch == "roberta" else 1
    return [first] + rng.integers(5, 100, n - 2).tolist() + [2]


# ---------------------------------------------------------------------------------------------
# The guard itself must be able to fail
# ---------------------------------------------------------------------------------------------
def test_host_tracker_catches_what_cuda_would_reject():
    model = cmixlib.random_model("bert")
    with HostTracker() as tr:
        ids = torch.tensor([_ids("bert")])                         # a host tensor (no device=)
        model(input_ids=ids)                                       # CPU ids into the model
    assert tr.violations
    with HostTracker() as tr:
        ids = torch.tensor([_ids("bert")])
        model(input_ids=ids.to(models.model_device(model)))        # moved first: fine
        out = model(input_ids=ids.to(models.model_device(model))).last_hidden_state
        out[0, torch.tensor([0, 1])]                               # host indices: fine on CUDA too
        out.cpu() + torch.ones(out.shape[-1])                      # results back on the CPU: fine
    assert tr.violations == []
    with HostTracker() as tr:
        out + torch.ones(out.shape[-1])                            # host tensor meets a CUDA one
    assert len(tr.violations) == 1


def _run_methods(model, arch: str, task: str) -> None:
    ids = _ids(arch)
    cmixlib.context_mixing(model, None, {"input_ids": [ids]})
    cmixlib.context_mixing(model, None, {"input_ids": [ids, ids[:5] + [2, 0]],
                                         "attention_mask": [[1] * 7, [1] * 6 + [0]]})
    cmixlib.context_mixing(model, None, {"input_ids": [ids]}, rows=[0, 3],
                           methods=["attn_norm_res_ln", "value_zeroing", "attention_flow", "alti"])
    cmixlib.context_mixing_ratio(model, None, {"input_ids": [ids]})
    hta(model, None, {"input_ids": [ids]}, layers=[0])
    dev = models.model_device(model)
    cap = run_and_capture(model, torch.tensor([ids], device=dev), torch.ones(1, 7, dtype=torch.long, device=dev))
    st = layer_states(cap, encoder_layers(model), 0, iter_sentences(cap)[0])[0]
    for method in ("factored", "batched"):
        value_zeroing_layer(st, method=method)
    target = (G.MLMTarget(position=3, target_id=9, foil_id=11) if task == "mlm" else G.ClassTarget())
    for name in G.METHODS:
        for level in (("input",) if name == "blank_out" else ("input", "layers")):
            G.attribute(model, torch.tensor([ids]), target, method=name, level=level, tokenizer=TOK)


@pytest.mark.parametrize("arch", FAMILIES)
def test_methods_keep_every_tensor_on_the_model_device(arch):
    """context_mixing (all methods, one sentence, a padded batch, selected rows), the ratio, HTA,
    both Value Zeroing algorithms and every gradient method at both levels, with MLM and class
    targets: no op mixes a host tensor with the model's (a CPU tensor with CUDA ones on a GPU)."""
    for task in ("mlm", "sequence-classification"):
        kw = {"num_labels": 2} if task != "mlm" else {}
        model = cmixlib.random_model(arch, task=task, seed=1, **kw)    # built outside the tracker
        with HostTracker() as tr:
            _run_methods(model, arch, task)
        assert tr.violations == [], "\n".join(sorted(set(tr.violations)))


def _examples(n: int, arch: str = "bert", length: int = 8, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ids = [0 if arch == "roberta" else 1] + rng.integers(5, 100, length - 2 + i % 2).tolist() + [2]
        out.append({"input_ids": ids, "target_index": 3, "target_id": 10, "foil_id": 11,
                    "cue_indices": [1], "label": i % 2, "tokens": ["w"] * len(ids)})
    return out


class DeviceSources(BundleSources):
    """Tiny random models of one family on ``device`` in ``dtype``, fake examples (the seam)."""

    def __init__(self, arch: str = "bert", device: str = "cpu", dtype=torch.float32):
        def make(task, seed, **kw):
            m = cmixlib.random_model(arch, task=task, layers=2, seed=seed, dtype=dtype, **kw)
            return FakeBundle(m.to(device))
        self.arch = arch
        self.mlm_bundle = make("mlm", 1)
        self.cls_bundle = make("sequence-classification", 2, num_labels=2)
        self.base_bundle = make("base", 3)

    def model_b(self, bundle_a):
        student = copy.deepcopy(bundle_a.model)
        training.keep_encoder_layers(student, [0])
        return FakeBundle(student), {"accuracy": 0.5}, "student (test)"

    def blimp(self, bundle, limit):
        return [dict(e, label="plural" if e["label"] else "singular")
                for e in _examples(limit or 8, self.arch)]

    def sst2(self, bundle, limit):
        return [dict(e, target_index=0) for e in _examples(limit or 4, self.arch, seed=1)]

    sst2_test = sst2      # ALTI's experiments read the test split

    def sva(self, bundle, limit):
        return _examples(limit or 4, self.arch, seed=2)

    def classification_inputs(self, bundle, task, limit):
        return [dict(e, target_index=0) for e in _examples(limit or 4, self.arch, seed=3)]

    def hatexplain_rationales(self, bundle, limit):
        return rationale_posts(limit or 4, cls_id=0 if self.arch == "roberta" else 1)


def _settings(name: str) -> dict:
    defaults = X.REGISTRY[name].defaults
    s = {k: v for k, v in {"ig_steps": 3, "probe_hidden": 0, "max_tokens": 9}.items() if k in defaults}
    return s


def _limit(name: str) -> int:
    return 8 if name == "vz-mdl-probing" else 3


#: Experiments that read the papers' own sentences with a real tokenizer (not the fakes' examples):
#: their model loading goes through the same Sources, checked by the experiments they borrow from.
NEEDS_REAL_INPUTS = {"paper-example-claims"}
#: Experiments on a decoder: their seam is a DecoderSources (a random Llama below), not the
#: encoder families' (given DeviceSources they would load and convert the real SmolLM2).
ON_A_DECODER = {"decoder-blimp"}


@pytest.mark.parametrize("arch", FAMILIES)
def test_every_experiment_keeps_every_tensor_on_the_model_device(arch):
    """All registered experiments on tiny random models, under the tracker."""
    sources = DeviceSources(arch)
    found = {}
    for name in X.REGISTRY:
        if name in NEEDS_REAL_INPUTS | ON_A_DECODER:
            continue
        with HostTracker() as tr:
            X.run_experiment(name, model=f"device-test-{name}", limit=_limit(name), settings=_settings(name),
                             progress=False, sources=sources, use_cache=False)
        if tr.violations:
            found[name] = sorted(set(tr.violations))
    assert not found, json.dumps(found, indent=1)


class DeviceDecoderSources(ToySources):
    """The decoder experiment's seam: a tiny random Llama on ``device`` in ``dtype``, toy pairs."""

    def __init__(self, device: str = "cpu", dtype=torch.float32):
        super().__init__()
        self.device, self.dtype = device, dtype

    def decoder(self):
        bundle, info = super().decoder()
        bundle.model.to(self.device, self.dtype)
        return bundle, info


def test_the_decoder_experiment_keeps_every_tensor_on_the_model_device():
    assert set(ON_A_DECODER) <= set(X.REGISTRY)
    for name in ON_A_DECODER:
        with HostTracker() as tr:
            X.run_experiment(name, model=f"device-test-{name}", limit=2, progress=False,
                             sources=DeviceDecoderSources(), use_cache=False)
        assert not tr.violations, sorted(set(tr.violations))


def test_trainers_keep_every_tensor_on_the_model_device():
    """The MLM-head trainer, masked-word accuracy, prompt fine-tuning and the classifier trainer
    with a real (40-word) tokenizer, under the tracker."""
    from test_training import TEXTS, WORDS, _examples as agreement_examples
    from transformers import BertTokenizer

    tok = BertTokenizer(vocab={w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS)})

    def tiny(task, **kw):
        return cmixlib.random_model("bert", task=task, vocab=len(tok), hidden=16, layers=1, heads=2, **kw)

    mlm_a, mlm_b, base, clf = tiny("mlm"), tiny("mlm"), tiny("base"), tiny("sequence-classification", num_labels=2)
    xs = ["this movie is good", "a great story", "the film was bad", "a boring plot"] * 2
    data = {"train": (xs, [1, 1, 0, 0] * 2), "dev": (xs[:4], [1, 1, 0, 0]), "train_pool": 8, "description": "toy"}
    with HostTracker() as tr:
        m, _ = training.train_mlm_head((mlm_a, tok), TEXTS, steps=3, batch_size=8, progress=False)
        training.masked_word_accuracy(m, tok, TEXTS[:5])
        training.train_mlm_head((base, tok), TEXTS[:6], steps=2, batch_size=4, progress=False)  # wraps
        ex = agreement_examples(tok, 8)
        training.finetune_prompt(mlm_b, ex, epochs=1, batch_size=4, progress=False, test_examples=ex)
        training.train_classifier("sst2", bundle=(clf, tok), epochs=1, batch_size=4, progress=False,
                                  task_data=data)
        cmixlib.context_mixing(clf, tok, ["the dog runs", "the film was very boring"])
    assert tr.violations == [], "\n".join(sorted(set(tr.violations)))


# ---------------------------------------------------------------------------------------------
# The device option
# ---------------------------------------------------------------------------------------------
def test_device_names_env_var_and_override(monkeypatch):
    auto = torch.device("cuda" if CUDA else "cpu")
    assert models.resolve_device(None) == auto == models.resolve_device("auto") == models.default_device()
    assert models.resolve_device("CPU") == torch.device("cpu")
    for bad in ("tpu", "gpu0", "meta"):
        with pytest.raises(ValueError, match="cpu, cuda or cuda:N"):
            models.resolve_device(bad)
    monkeypatch.setenv("CMIX_DEVICE", "cpu")
    assert models.default_device() == torch.device("cpu")
    monkeypatch.setenv("CMIX_DEVICE", "nonsense")
    with pytest.raises(ValueError, match="Unknown device 'nonsense'"):
        models.default_device()
    monkeypatch.setenv("CMIX_DEVICE", "cpu")
    with models.use_device("auto"):                          # the run's option beats the env var
        assert models.default_device() == auto
        with models.use_device("cpu"):
            assert models.default_device() == torch.device("cpu")
        assert models.default_device() == auto
    with models.use_device(None):
        assert models.default_device() == torch.device("cpu")
    with pytest.raises(ValueError):
        with models.use_device("tpu"):
            pass
    assert models._device_override == []


@pytest.mark.skipif(CUDA, reason="checks the error raised where there is no CUDA")
def test_asking_for_cuda_without_it_is_a_clear_error(monkeypatch, capsys):
    for name in ("cuda", "cuda:1"):
        with pytest.raises(ValueError, match="no CUDA GPU"):
            models.resolve_device(name)
    monkeypatch.setenv("CMIX_DEVICE", "cuda")
    with pytest.raises(ValueError, match=r"\$CMIX_DEVICE"):
        cmixlib.load_model(allow_fallback=True)              # fails before loading anything
    monkeypatch.delenv("CMIX_DEVICE")
    # even when the result is in the cache, a run on an unavailable device says so
    sources = DeviceSources("bert")
    X.run_experiment("globenc-fig5-ln-outliers", model="dev-fake", progress=False, sources=sources)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        X.run_experiment("globenc-fig5-ln-outliers", model="dev-fake", progress=False, sources=sources,
                         device="cuda")
    assert cli.main(["run", "globenc-fig5-ln-outliers", "--device", "cuda", "--quiet"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_device_is_recorded_in_meta_and_kept_out_of_the_cache_key():
    """Results are device-independent up to rounding, so a run on another device reuses the
    cached result; meta.json says where the models of the computed run were."""
    sources = DeviceSources("bert")
    r1 = X.run_experiment("globenc-fig5-ln-outliers", model="dev-fake", progress=False, sources=sources,
                          device="cpu")
    assert r1.meta["device"] == "cpu" and not r1.from_cache
    r2 = X.run_experiment("globenc-fig5-ln-outliers", model="dev-fake", progress=False, sources=sources,
                          device="auto")
    assert r2.from_cache and r2.meta["cache_key"] == r1.meta["cache_key"]
    assert "device: cpu" in cli.format_run(r1)


def test_cli_passes_the_device_option(monkeypatch, capsys):
    seen = {}

    def fake_run(name, **kw):
        seen.update(kw, name=name)
        raise KeyError("stop here")

    monkeypatch.setattr(X, "run_experiment", fake_run)
    assert cli.main(["run", "vz-mdl-probing", "--limit", "50", "--device", "cpu", "--quiet"]) == 2
    assert seen["device"] == "cpu" and seen["limit"] == 50 and seen["name"] == "vz-mdl-probing"
    cli.main(["run", "vz-mdl-probing"])
    assert seen["device"] is None                              # default: $CMIX_DEVICE, else auto


def test_load_model_and_the_book_follow_cmix_device(monkeypatch, packaged_bundle):
    from cmixlib.book import setup_notebook

    monkeypatch.setenv("CMIX_DEVICE", "cpu")
    assert setup_notebook(style=False)["device"] == "cpu"
    path = str(cmixlib.packaged_model_path())
    assert models.model_device(cmixlib.load_model(path).model) == torch.device("cpu")
    monkeypatch.delenv("CMIX_DEVICE")
    assert setup_notebook(style=False)["device"] == ("cuda" if CUDA else "cpu")


# ---------------------------------------------------------------------------------------------
# CUDA against CPU (skipped without a GPU)
# ---------------------------------------------------------------------------------------------
def compare_methods(arch: str, device: str) -> None:
    """Every method of cmixlib.METHODS (one sentence and a padded batch), HTA, and every method
    of cmixlib.gradients.METHODS (MLM target, both levels) on ``device`` in float32 (DeepLift in
    float64, see below) against the CPU in float64, by rule 2 (tests/tolerances.py): the error
    may be at most 4x that of the same float32 computation on the CPU (plus a floor). (Run with ``device="cpu"`` it checks the
    comparison itself: the float32 run is then its own baseline.)"""
    cpu = cmixlib.random_model(arch, task="mlm", seed=1, dtype=torch.float64)
    cpu32 = cmixlib.random_model(arch, task="mlm", seed=1, dtype=torch.float32)
    other = cmixlib.random_model(arch, task="mlm", seed=1, dtype=torch.float32).to(device)
    ids = _ids(arch, n=9)
    batch = {"input_ids": [ids, ids[:6] + [2, 0, 0]], "attention_mask": [[1] * 9, [1] * 7 + [0, 0]]}

    def listed(res):
        return res if isinstance(res, list) else [res]

    for text in ({"input_ids": [ids]}, batch):
        want = listed(cmixlib.context_mixing(cpu, None, text))
        base = listed(cmixlib.context_mixing(cpu32, None, text))
        got = listed(cmixlib.context_mixing(other, None, text))
        for w, b, g in zip(want, base, got):
            assert set(w) == set(b) == set(g) == set(cmixlib.METHODS)
            for m in cmixlib.METHODS:
                assert_no_worse_than_baseline(g[m], w[m], b[m], err_msg=f"{arch} {m} on {device}")
    one = {"input_ids": [ids]}
    assert_no_worse_than_baseline(hta(other, None, one), hta(cpu, None, one), hta(cpu32, None, one),
                                  err_msg=f"{arch} HTA on {device}")
    target = G.MLMTarget(position=3, target_id=9, foil_id=11)
    # DeepLift's rescale multipliers divide differences of activations (dy / dx), so float32
    # rounding is amplified by 1/|dx| wherever the kernels round, and the CPU's float32 error is
    # no yardstick for another device's (on an H200, electra: 14x the CPU's, float64 agreeing).
    # It runs on the device in float64, still held to the CPU's float32 error: a wrong result
    # (an op on the wrong device, a dropped term) misses that by orders of magnitude.
    other64 = cmixlib.random_model(arch, task="mlm", seed=1, dtype=torch.float64).to(device)
    for name in G.METHODS:
        for level in (("input",) if name == "blank_out" else ("input", "layers")):
            kw = dict(method=name, level=level, tokenizer=TOK)
            w = G.attribute(cpu, torch.tensor([ids]), target, **kw)
            b = G.attribute(cpu32, torch.tensor([ids]), target, **kw)
            on = other64 if name == "deeplift" else other
            g = G.attribute(on, torch.tensor([ids], device=device), target, **kw)
            assert_no_worse_than_baseline(g, w, b, err_msg=f"{arch} {name} {level} on {device}")


def test_compare_methods_on_the_cpu():
    """The CUDA comparison's own code, with the CPU as the device (one family, quick)."""
    compare_methods("bert", "cpu")


@needs_cuda
@pytest.mark.parametrize("arch", FAMILIES)
def test_methods_on_cuda_float32_match_cpu_float64(arch):
    compare_methods(arch, "cuda")


# one experiment per family of experiments (Value Zeroing, ALTI, GlobEnc)
CUDA_EXPERIMENTS = ("vz-cue-alignment", "alti-table2", "globenc-correlations")


def compare_experiment(name: str, arch: str, device: str) -> None:
    """``name`` on tiny random models of ``arch`` in float64, on ``device`` against the CPU: every
    frame equal up to atol 1e-8 / rtol 1e-6, and ``meta["device"]`` says where it ran."""
    runs = [X.run_experiment(name, model=f"device-{arch}-{where}", limit=4, settings=_settings(name),
                             progress=False, use_cache=False, sources=DeviceSources(arch, where, torch.float64))
            for where in ("cpu", device)]
    for res, where in zip(runs, ("cpu", device)):
        assert res.meta["device"].startswith(where), res.meta["device"]
    for key, want in runs[0].frames.items():
        pd.testing.assert_frame_equal(runs[1].frames[key], want, check_exact=False, atol=1e-8, rtol=1e-6,
                                      obj=f"{name} {arch} {key}")


@needs_cuda
@pytest.mark.parametrize("arch", FAMILIES)
@pytest.mark.parametrize("name", CUDA_EXPERIMENTS)
def test_one_experiment_per_family_on_cuda_matches_cpu(name, arch):
    compare_experiment(name, arch, "cuda")


@needs_cuda
@pytest.mark.parametrize("name", sorted(ON_A_DECODER))
def test_the_decoder_experiment_on_cuda_matches_cpu(name):
    runs = [X.run_experiment(name, model=f"device-decoder-{where}", limit=2, progress=False,
                             use_cache=False, sources=DeviceDecoderSources(where, torch.float64))
            for where in ("cpu", "cuda")]
    assert runs[1].meta["device"].startswith("cuda"), runs[1].meta["device"]
    for key, want in runs[0].frames.items():
        pd.testing.assert_frame_equal(runs[1].frames[key], want, check_exact=False, atol=1e-8,
                                      rtol=1e-6, obj=f"{name} {key}")


@needs_cuda
def test_cmix_run_vz_mdl_probing_on_cuda(capsys):
    """The real run (packaged model, real BLiMP data, models trained on the GPU into a fresh
    cache): ``cmix run vz-mdl-probing --limit 50 --device cuda``."""
    assert cli.main(["run", "vz-mdl-probing", "--limit", "50", "--device", "cuda", "--quiet", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert "device: cuda" in out
