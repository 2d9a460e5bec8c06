"""Checkers of chapters 13 and 14 (cmix_course.saliency_exercises): they pass the model
solutions, name the typical mistakes, report stubs as not attempted, and their references equal
the library's functions."""
import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

import cmix_course as ex
from cmix_course.saliency_exercises import random_raw_maps


# ----- 13.1: Spearman of the rolled-out [CLS] row with a saliency vector ------------------
def good_cls_spearman(maps, saliency, normalize):
    m = np.asarray(maps, dtype=float)
    if normalize:
        m = m / m.sum(-1, keepdims=True)
    rolled, out = m[0], []
    for layer in range(len(m)):
        if layer:
            rolled = m[layer] @ rolled
        out.append(spearmanr(rolled[0], saliency).statistic)
    return np.array(out)


def _variant(**kw):
    def fn(maps, saliency, normalize):
        return ex.reference_cls_spearman(maps, saliency, normalize, **kw)
    return fn


def test_cls_spearman_accepts_the_solution(capsys):
    res = ex.check_cls_spearman(good_cls_spearman)
    assert res and res.status == "passed"
    assert "all checks passed" in capsys.readouterr().out
    assert any("tiny BERT classifier" in m for m in res.messages)   # the real-maps case ran


@pytest.mark.parametrize("wrong, phrase", [
    (lambda m, s, normalize: good_cls_spearman(m, s, False), "not normalised although"),
    (lambda m, s, normalize: good_cls_spearman(m, s, True), "normalised although normalize=False"),
    (_variant(order="right"), "wrong order"),
    (_variant(identity=True), "identity was added"),
    (_variant(row="column"), "column 0"),
    (_variant(keep=slice(1, -1)), "[CLS] and [SEP] were left out"),
    (_variant(rolled=False), "not rolled out"),
    (_variant(correlation="pearson"), "Pearson"),
])
def test_cls_spearman_names_the_mistake(wrong, phrase):
    res = ex.check_cls_spearman(wrong, verbose=False)
    assert not res and res.status == "failed"
    assert any(phrase in m and "likely cause" in m for m in res.messages), res.messages


def test_cls_spearman_shape_and_stub():
    res = ex.check_cls_spearman(lambda m, s, normalize: good_cls_spearman(m, s, normalize)[-1],
                                verbose=False)
    assert not res and any("one number" in m for m in res.messages)
    assert any("last layer's rho" in m for m in res.messages)

    def stub(maps, saliency, normalize):
        raise NotImplementedError

    res = ex.check_cls_spearman(stub, verbose=False)
    assert res.status == "not attempted"


def test_cls_spearman_cases_separate_the_mistakes():
    """The checker's input makes raw and row-normalised rollouts rank [CLS]'s row differently
    (else the exercise could not tell them apart)."""
    maps = random_raw_maps(4, 9, 0)
    sal = np.random.default_rng(13).random(9) ** 2
    raw = ex.reference_cls_spearman(maps, sal, False)
    assert not np.allclose(raw, ex.reference_cls_spearman(maps, sal, True), atol=1e-3)


@pytest.mark.parametrize("normalize", [False, True])
def test_reference_cls_spearman_matches_library(normalize):
    from cmixlib.methods.aggregation import normalize_rows, rollout
    from cmixlib.metrics.statistics import spearman_rows

    maps = random_raw_maps(5, 7, 3)
    sal = np.random.default_rng(4).random(7)
    rolled = (rollout(normalize_rows(maps), add_identity=False, normalize=True) if normalize
              else rollout(maps, add_identity=False, normalize=False))
    np.testing.assert_allclose(ex.reference_cls_spearman(maps, sal, normalize),
                               spearman_rows(rolled[:, 0], sal), atol=1e-12)


def test_reference_cls_spearman_matches_the_experiment():
    """What ``globenc-correlations`` computes for one example (its per-example rho) equals the
    reference applied to the library's raw N-Enc maps and gradient × input saliency."""
    import cmixlib
    from cmixlib.methods import dispatch as core
    from cmixlib.methods.aggregation import normalize_rows, rollout
    from cmixlib.experiments.globenc import correlation_rows
    from cmixlib.gradients import ClassTarget, batch_attribute
    from fakes import FakeBundle

    # float64: the result is a Spearman rho of ranks, and float32 rounding could swap two near-equal
    # scores differently on the two paths; in float64 no two ranked values lie within 1e-9 of their
    # scale (asserted below), ~1e7 times float64 rounding, so no CPU can flip a rank
    model = cmixlib.random_model("bert", task="sequence-classification", layers=3, num_labels=2,
                                 seed=5, dtype=torch.float64)
    example = {"input_ids": [1, 17, 33, 9, 41, 2], "label": 1}
    rho = correlation_rows(FakeBundle(model), [example], ["globenc_layer"], "layers")[0]
    ids = torch.tensor([example["input_ids"]])
    maps = core.context_mixing(model, None, {"input_ids": ids}, methods=["globenc_layer"],
                               normalize=False)["globenc_layer"]
    sal = batch_attribute(model, ids, [ClassTarget(1)], "grad_x_input_l2",
                          "layers")["grad_x_input_l2"][0][0]
    for variant, normalize in [("raw", False), ("row-normalised", True)]:
        rolled = rollout(normalize_rows(maps) if normalize else maps, add_identity=False, normalize=normalize)
        for v in [sal, *rolled[:, 0]]:                  # the ranked values: no near-ties that could flip
            assert np.diff(np.sort(v)).min() > 1e-9 * np.abs(v).max()
        # float64 on both sides; rho is a rational of ranks, identical when no rank flips
        np.testing.assert_allclose(rho[(variant, "globenc_layer", "rollout")],
                                   ex.reference_cls_spearman(maps, sal, normalize), rtol=0, atol=1e-12)


# ----- 14.1: blank-out ---------------------------------------------------------------------
def good_blank_out(model, ids, pos, t_id, f_id, r_id):
    with torch.no_grad():
        def p(x):
            z = model(input_ids=x).logits[:, pos]
            return torch.sigmoid(z[:, t_id] - z[:, f_id])

        n = ids.shape[1]
        batch = ids.repeat(n, 1)
        batch[torch.arange(n), torch.arange(n)] = r_id
        return p(ids) - p(batch)


def test_blank_out_accepts_the_solution(capsys):
    res = ex.check_blank_out(good_blank_out)
    assert res and res.status == "passed"
    assert "all checks passed" in capsys.readouterr().out


def _blank_variant(**kw):
    def fn(model, ids, pos, t_id, f_id, r_id):
        return ex.reference_blank_out(model, ids, pos, t_id, f_id, r_id, **kw)
    return fn


@pytest.mark.parametrize("wrong, phrase", [
    (lambda *a: -good_blank_out(*a), "sign is reversed"),
    (_blank_variant(prob="vocab"), "whole vocabulary"),
    (_blank_variant(prob="logit"), "logit difference"),
    (_blank_variant(skip=(0, 7, 4)), "scores every position"),
    (_blank_variant(delete=True), "deleted"),
])
def test_blank_out_names_the_mistake(wrong, phrase):
    res = ex.check_blank_out(wrong, verbose=False)
    assert not res and res.status == "failed"
    assert any(phrase in m and "likely cause" in m for m in res.messages), res.messages


def test_blank_out_perturbed_probabilities_and_stub():
    def perturbed(model, ids, pos, t_id, f_id, r_id):
        with torch.no_grad():
            z = model(input_ids=ids).logits[0, pos]
        return float(torch.sigmoid(z[t_id] - z[f_id])) - good_blank_out(model, ids, pos, t_id,
                                                                          f_id, r_id)

    res = ex.check_blank_out(perturbed, verbose=False)
    assert not res and any("perturbed probabilities" in m for m in res.messages)
    res = ex.check_blank_out(lambda *a: None, verbose=False)
    assert res.status == "not attempted"


def test_reference_blank_out_matches_library():
    import cmixlib
    from cmixlib.gradients import MLMTarget, blank_out

    model = cmixlib.random_model("roberta", task="mlm", seed=2, dtype=torch.float64)
    ids = torch.tensor([[0, 17, 33, 9, 4, 41, 25, 2]])
    want = blank_out(model, ids, MLMTarget(4, 11, 17, score="prob"), replacement=3,
                     skip_special=False)
    np.testing.assert_allclose(ex.reference_blank_out(model, ids, 4, 11, 17, 3), want,
                               atol=1e-10)
