"""Exercises 9.3 and 10.3's checkers (cmix_course.chance_exercises): they pass the closed-form
chance levels of a random row and the add-one online code, report a stub as not attempted,
name each usual mistake, and their references agree with the library: the chance levels with
cmixlib's own cue_alignment on random rows (Monte Carlo, within 4 standard errors) and the
add-one code with the block schedule and first-block convention of cmixlib.metrics.probing."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cmix_course as ex
from cmix_course import chance_exercises as C
from cmixlib.metrics import probing
from cmixlib.metrics.evaluation import cue_alignment


def stub(*args):
    raise NotImplementedError


def causes(res):
    return [m for m in res.messages if "likely cause" in m]


# ----- 9.3: the chance levels of the cue-alignment scores ---------------------------------
def harmonic(n):
    return sum(1.0 / r for r in range(1, n + 1))


def good_baselines(n, c):
    H = harmonic(n)
    return c / n, (c - 1) / (n - 1) + (n - c) * H / (n * (n - 1)), (n - c) / (c + 1)


def loop_baselines(n, c):
    """Another honest route: AP as the mean over ranks r of P(cue at r) E[Prec@r | cue at r]."""
    ap = sum((1 + (c - 1) * (r - 1) / (n - 1)) / r for r in range(1, n + 1)) / n
    return {"dot": c / n, "ap": ap, "probes_needed": (n - c) / (c + 1)}


def _with(metric, value):
    keys = ("dot", "ap", "probes_needed")

    def fn(n, c):
        out = list(good_baselines(n, c))
        out[keys.index(metric)] = value(n, c)
        return tuple(out)
    return fn


WRONG_93 = [
    (_with("dot", lambda n, c: 1 / n), "dot", "ONE cue token"),
    (_with("dot", lambda n, c: c / (n - 1)), "dot", "keeps every token"),
    (_with("ap", lambda n, c: harmonic(n)), "ap", "H_n instead of H_n / n"),
    (_with("ap", lambda n, c: harmonic(n) / n), "ap", "ONE cue token"),
    (_with("ap", lambda n, c: (c - 1) / (n - 1) + (n - c) * harmonic(n - 1) / (n * (n - 1))),
     "ap", "stops one short"),
    (_with("ap", lambda n, c: c / n), "ap", "precision at a random cut"),
    (_with("probes_needed", lambda n, c: (n + 1) / (c + 1)), "probes_needed", "1-based RANK"),
    (_with("probes_needed", lambda n, c: (n - 1) / 2), "probes_needed", "ONE cue token"),
    (_with("probes_needed", lambda n, c: (n - c) / 2), "probes_needed", "not 1/2"),
    (_with("probes_needed", lambda n, c: n / (c + 1)), "probes_needed", "never above the best"),
]


@pytest.mark.parametrize("seed", [0, 7, 38])
def test_random_baselines_checker_passes_both_routes(seed):
    for fn in (good_baselines, loop_baselines):
        res = ex.check_random_baselines(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 3 and all(res.cases.values())


def test_random_baselines_stub_is_not_attempted():
    assert ex.check_random_baselines(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, metric, phrase", WRONG_93,
                         ids=[f"{m}-{p}" for _, m, p in WRONG_93])
def test_random_baselines_checker_names_the_mistake(wrong, metric, phrase):
    res = ex.check_random_baselines(wrong, verbose=False)
    assert not res
    named = causes(res)
    assert len(named) == 1 and named[0].lstrip(" ·").startswith(metric), res.report()
    assert phrase in named[0], res.report()


def test_a_simulation_is_told_to_give_the_closed_form():
    rng = np.random.default_rng(1)

    def simulated(n, c):
        exact = np.array(good_baselines(n, c))
        return exact * (1 + 0.01 * rng.standard_normal(3))

    res = ex.check_random_baselines(simulated, verbose=False)
    assert not res and any("closed form" in m for m in res.messages), res.report()


@pytest.mark.parametrize("n, c", [(9, 1), (12, 2), (6, 3), (5, 4)])
def test_the_chance_levels_are_what_cue_alignment_gives_random_rows(n, c):
    """The closed forms equal the mean of cmixlib's cue_alignment over uniform random rows
    (the method Random), within 4 standard errors of the Monte-Carlo mean."""
    rng = np.random.default_rng(n * 10 + c)
    rows = 6000
    vals = np.array([list(cue_alignment(rng.uniform(size=n), list(range(c))).values())
                     for _ in range(rows)])
    want = C.reference_random_baselines(n, c)
    mean, se = vals.mean(0), vals.std(0, ddof=1) / math.sqrt(rows)
    for k, key in enumerate(("dot", "ap", "probes_needed")):
        assert abs(mean[k] - want[key]) < 4 * se[k], (key, mean[k], want[key], se[k])
    mc, mc_se = C.monte_carlo_baselines(n, c, rows=rows)
    assert np.all(np.abs(mc - mean) < 4 * np.hypot(se, mc_se))      # the checker's own MC


def test_one_cue_token_gives_the_chapters_levels():
    for n in (5, 11):
        got = C.reference_random_baselines(n, 1)
        assert got["dot"] == pytest.approx(1 / n)
        assert got["ap"] == pytest.approx(harmonic(n) / n)
        assert got["probes_needed"] == pytest.approx((n - 1) / 2)


# ----- 10.3: the online code of the label frequencies ------------------------------------
def good_prior(labels, bounds, K):
    labels = np.asarray(labels)
    bits = bounds[0] * math.log2(K)
    for a, b in zip(bounds[:-1], bounds[1:]):
        p = (np.bincount(labels[:a], minlength=K) + 1) / (a + K)
        bits -= np.log2(p[labels[a:b]]).sum()
    return bits, len(labels) * math.log2(K) / bits


def loop_prior(labels, bounds, K):
    """Every label with the add-one rule of the counts before its block (the first block's
    counts are empty: the uniform code)."""
    starts = [0, *bounds[:-1]]
    bits = 0.0
    for a, b in zip(starts, bounds):
        before = [int(v) for v in labels[:a]]
        for i in range(a, b):
            bits -= math.log2((before.count(int(labels[i])) + 1) / (a + K))
    return {"codelength": bits, "compression": len(labels) * math.log2(K) / bits}


def _prior_variant(add=1.0, counted=None, first=True, log=np.log2, sequential=False):
    def fn(labels, bounds, K):
        labels = np.asarray(labels)
        bits = bounds[0] * float(log(K)) if first else 0.0
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            if sequential:
                for t in range(a, b):
                    n_c = np.bincount(labels[:t], minlength=K)[labels[t]]
                    bits -= float(log((n_c + 1) / (t + K)))
                continue
            lo, hi = counted(i, a, b, bounds) if counted else (0, a)
            cnt = np.bincount(labels[lo:hi], minlength=K)
            with np.errstate(divide="ignore"):
                bits -= float(log((cnt + add) / (hi - lo + K * add))[labels[a:b]].sum())
        return bits, len(labels) * math.log2(K) / bits
    return fn


WRONG_103 = [
    (_prior_variant(log=np.log), "natural logarithms"),
    (_prior_variant(first=False), "first block is missing"),
    (_prior_variant(add=0.0), "unsmoothed frequencies"),
    (_prior_variant(counted=lambda i, a, b, bs: (0, b)), "block being sent were counted"),
    (_prior_variant(counted=lambda i, a, b, bs: ((0, *bs)[i], a)), "only the previous block"),
    (_prior_variant(sequential=True), "updated after every label"),
    (_prior_variant(add=0.5), "Krichevsky-Trofimov"),
    (lambda y, b, K: (good_prior(y, b, K)[0], 1 / good_prior(y, b, K)[1]),
     "compression is inverted"),
    (lambda y, b, K: (good_prior(y, b, K)[0], len(y) / good_prior(y, b, K)[0]),
     "not N (1 bit per label"),
]


@pytest.mark.parametrize("seed", [0, 7, 38])
def test_prior_code_checker_passes_both_routes(seed):
    for fn in (good_prior, loop_prior):
        res = ex.check_prior_code(fn, seed=seed, verbose=False)
        assert res and res.status == "passed", res.report()
        assert len(res.cases) == 2 and all(res.cases.values())


def test_prior_code_stub_is_not_attempted():
    assert ex.check_prior_code(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", WRONG_103, ids=[p for _, p in WRONG_103])
def test_prior_code_checker_names_the_mistake(wrong, phrase):
    res = ex.check_prior_code(wrong, verbose=False)
    assert not res
    assert any(phrase in m for m in causes(res)), res.report()


@pytest.mark.parametrize("seed", [0, 7])
def test_the_checker_cases_exercise_the_unseen_class(seed):
    """The K = 3 case has a class that the first blocks never show (else unsmoothed counts
    would not be caught), and the K = 2 case uses the library's block schedule."""
    (_, y2, b2, k2), (_, y3, b3, k3) = C._prior_cases(seed)
    assert b2 == probing.block_boundaries(len(y2)) and k2 == 2
    assert 2 not in set(y3[: b3[1]].tolist()) and 2 in set(y3.tolist()) and k3 == 3


def test_the_prior_code_follows_the_librarys_first_block_and_units():
    """With features that carry nothing (a constant), the code's first block is the library's
    (N_1 log2 K bits, block 0 of mdl_probe), both count in bits, and the add-one rule's cost of
    a block is -sum_k m_k log2((n_k + 1)/(N_b + K))."""
    y = np.random.default_rng(3).integers(0, 2, size=80)
    bounds = probing.block_boundaries(len(y))
    lib = probing.mdl_probe(np.zeros((len(y), 1)), y, num_classes=2, shuffle=False,
                            max_epochs=2, small_epochs=1, hidden=0)
    assert list(lib.blocks["end"]) == bounds
    assert lib.blocks["cost_bits"].iloc[0] == pytest.approx(bounds[0] * math.log2(2))
    bits, comp = C.reference_prior_code(y, bounds, 2)
    assert comp == pytest.approx(len(y) / bits)
    by_block = bounds[0] * 1.0
    for a, b in zip(bounds[:-1], bounds[1:]):
        n_k = np.bincount(y[:a], minlength=2)
        m_k = np.bincount(y[a:b], minlength=2)
        by_block -= float(np.sum(m_k * np.log2((n_k + 1) / (a + 2))))
    assert bits == pytest.approx(by_block, rel=1e-12)
