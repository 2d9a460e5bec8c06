"""Exercise 3.2's checker (cmix_course.flow_exercises.check_attention_flow): it passes a right
maximum flow, reports a stub as not attempted, names each usual mistake, and its reference (the
library's scipy solver) equals an independent networkx max-flow, on every case it runs."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import cmix_course as ex
from cmix_course import flow_exercises as F


def _prepared(maps, add_identity):
    m = np.asarray(maps, dtype=float)
    return 0.5 * m + 0.5 * np.eye(m.shape[-1]) if add_identity else m


def _nx_flow(caps, i, j):
    """Maximum flow from input token j to token i at the last layer, capacities as given."""
    top, n = len(caps), caps.shape[-1]
    G = nx.DiGraph()
    for l in range(1, top + 1):
        for k in range(n):
            for b in range(n):
                G.add_edge((l - 1, k), (l, b), capacity=float(caps[l - 1, b, k]))
    return nx.maximum_flow_value(G, (0, j), (top, i))


def good_flow(maps, i, j, add_identity):
    return _nx_flow(_prepared(maps, add_identity), i, j)


def _rollout_entry(maps, i, j, add_identity):
    m = _prepared(maps, add_identity)
    out = m[0]
    for layer in m[1:]:
        out = layer @ out
    return out[i, j]


def _widest(maps, i, j, add_identity):
    m = _prepared(maps, add_identity)
    best = np.full(m.shape[-1], 0.0)
    best[j] = np.inf
    for layer in m:
        best = np.array([max(min(best[k], layer[b, k]) for k in range(len(best)))
                         for b in range(len(best))])
    return best[i]


def _normalised(maps, i, j, add_identity):
    row = [good_flow(maps, i, k, add_identity) for k in range(np.shape(maps)[-1])]
    return row[j] / sum(row)


WRONG = [
    (lambda m, i, j, a: good_flow(np.swapaxes(m, -1, -2), i, j, a), "capacities are transposed"),
    (lambda m, i, j, a: good_flow(m, j, i, a), "source and sink are swapped"),
    (_rollout_entry, "rollout's entry"),
    (_widest, "the best single path"),
    (lambda m, i, j, a: good_flow(m, i, j, False), "the identity was not added"),
    (lambda m, i, j, a: good_flow(m, i, j, True), "the identity was added although"),
    (lambda m, i, j, a: _nx_flow(np.asarray(m) + a * np.eye(np.shape(m)[-1]), i, j),
     "was not row-normalised"),
    (lambda m, i, j, a: _prepared(m, a)[-1, i, j], "only the last layer's map was used"),
    (_normalised, "divided by the row's sum"),
]


@pytest.mark.parametrize("seed", [0, 7, 3])
def test_the_checker_passes_a_right_flow(seed):
    res = ex.check_attention_flow(good_flow, seed=seed, verbose=False)
    assert res and res.status == "passed", res.report()
    assert len(res.cases) == 4 and all(res.cases.values()), res.cases


def test_a_stub_is_not_attempted():
    def stub(maps, i, j, add_identity):
        raise NotImplementedError

    res = ex.check_attention_flow(stub, verbose=False)
    assert res.status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", WRONG, ids=[p for _, p in WRONG])
@pytest.mark.parametrize("seed", [0, 7])
def test_the_checker_names_the_mistake(wrong, phrase, seed):
    res = ex.check_attention_flow(wrong, seed=seed, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert any(phrase in m for m in causes), res.report()
    # on the random and the BERT cases (pairs chosen so that every mistake differs), the named
    # cause is this one and no other
    assert sum(phrase in m for m in causes) >= 2, res.report()


def test_a_scalar_is_required():
    res = ex.check_attention_flow(lambda m, i, j, a: np.ones(3), verbose=False)
    assert not res and any("return one number" in m for m in res.messages)


@pytest.mark.parametrize("seed", [0, 7, 1, 38])
def test_the_reference_equals_networkx_on_every_case(seed):
    for label, maps, i, j, add in F._cases(seed):
        assert i != j or "by hand" in label
        want = good_flow(maps, i, j, add)
        assert F.reference_flow(maps, i, j, add) == pytest.approx(want, abs=1e-7), label
        assert F.widest_path(maps, i, j, add) == pytest.approx(_widest(maps, i, j, add))


def test_the_example_by_hand_is_what_the_grading_notes_say():
    """0.9 = min(1, 0.4) + min(0.5, 0.4) + min(0.1, 0.2); rollout 0.62; best single path 0.4."""
    m, i, j = F.HAND_MAPS, F.HAND_SINK, F.HAND_SOURCE
    assert np.allclose(m.sum(-1), 1)
    assert good_flow(m, i, j, False) == pytest.approx(0.9)
    assert sum(min(m[0, k, j], m[1, i, k]) for k in range(3)) == pytest.approx(0.9)
    assert _rollout_entry(m, i, j, False) == pytest.approx(0.62)
    assert _widest(m, i, j, False) == pytest.approx(0.4)
