"""Attention flow's joint solve (all problems of a layer in one scipy max-flow call) against two
obvious references on random maps: one scipy max-flow call per (layer, sink, source) on the whole
layered graph (the previous implementation), and networkx's max flow on the same integer
capacities. Capacities are integers (maps scaled by ``FLOW_SCALE``), so max-flow values are
integers and every comparison is exact equality."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

import cmixlib
import cmixlib.methods.aggregation as att
from cmixlib import InputError, attention_flow


def capacities(maps, add_identity):
    arr = np.asarray(maps, dtype=np.float64)
    if add_identity:
        arr = cmixlib.normalize_rows(arr + np.eye(arr.shape[-1]))
    return np.round(arr * att.FLOW_SCALE).astype(np.int64)


def separate_solves(maps, add_identity=True, rows=None):
    """Reference: one max-flow call per layer, sink and source on the whole layered graph of
    layers 0..top+1 (node k * n + t = token t at layer k)."""
    icap = capacities(maps, add_identity)
    L, n, _ = icap.shape
    out = np.full((L, n, n), np.nan)
    for top in range(L):
        src, dst, cap = [], [], []
        for k in range(top + 1):
            for i in range(n):
                for j in range(n):
                    if icap[k, i, j] > 0:
                        src.append(k * n + j)
                        dst.append((k + 1) * n + i)
                        cap.append(icap[k, i, j])
        size = (top + 2) * n
        graph = csr_matrix((np.array(cap, np.int32), (np.array(src, int), np.array(dst, int))),
                           shape=(size, size))
        for i in (range(n) if rows is None else rows):
            for j in range(n):
                value = maximum_flow(graph, j, (top + 1) * n + i).flow_value
                out[top, i, j] = value / att.FLOW_SCALE
    return out


def networkx_flows(maps, add_identity=True, rows=None):
    """Reference: networkx max flow on the same integer capacities (exact integer arithmetic)."""
    icap = capacities(maps, add_identity)
    L, n, _ = icap.shape
    out = np.full((L, n, n), np.nan)
    for top in range(L):
        G = nx.DiGraph()
        G.add_nodes_from((k, t) for k in range(top + 2) for t in range(n))
        for k in range(top + 1):
            for i in range(n):
                for j in range(n):
                    if icap[k, i, j] > 0:
                        G.add_edge((k, j), (k + 1, i), capacity=int(icap[k, i, j]))
        for i in (range(n) if rows is None else rows):
            for j in range(n):
                out[top, i, j] = nx.maximum_flow_value(G, (0, j), (top + 1, i)) / att.FLOW_SCALE
    return out


def random_maps(seed, L, n, zeros=0.0, causal=False):
    rng = np.random.default_rng(seed)
    a = rng.random((L, n, n)) ** 3                   # skewed, as attention is
    a[rng.random(a.shape) < zeros] = 0.0
    if causal:
        a = np.tril(a)
    sums = a.sum(-1, keepdims=True)
    return np.divide(a, sums, out=np.zeros_like(a), where=sums > 0)


CASES = [  # (seed, L, n, zeros, causal, add_identity, rows)
    (0, 3, 1, 0.0, False, True, None),
    (1, 2, 2, 0.0, False, True, None),
    (2, 4, 5, 0.3, False, True, None),
    (3, 4, 5, 0.3, False, False, None),        # zero rows and unreachable tokens
    (4, 5, 7, 0.5, False, True, [6, 0]),
    (5, 6, 9, 0.0, False, True, [0]),
    (6, 4, 6, 0.0, True, False, None),         # causal maps: half the edges absent
]


@pytest.mark.parametrize("seed,L,n,zeros,causal,add_identity,rows", CASES)
def test_flow_equals_separate_solves(seed, L, n, zeros, causal, add_identity, rows):
    maps = random_maps(seed, L, n, zeros, causal)
    got = attention_flow(maps, add_identity=add_identity, rows=rows)
    np.testing.assert_array_equal(got, separate_solves(maps, add_identity, rows))


@pytest.mark.parametrize("seed,L,n,zeros,causal,add_identity,rows", CASES[1:5])
def test_flow_equals_networkx(seed, L, n, zeros, causal, add_identity, rows):
    maps = random_maps(seed, L, n, zeros, causal)
    got = attention_flow(maps, add_identity=add_identity, rows=rows)
    np.testing.assert_array_equal(got, networkx_flows(maps, add_identity, rows))


@pytest.mark.parametrize("budget", [1, 200, 10 ** 9])
def test_flow_chunks_give_the_same_values(monkeypatch, budget):
    """Chunks of one problem, of a few problems and of all problems of a layer agree exactly."""
    maps = random_maps(7, 4, 6, zeros=0.2)
    want = separate_solves(maps)
    monkeypatch.setattr(att, "FLOW_EDGES_PER_SOLVE", budget)
    np.testing.assert_array_equal(attention_flow(maps), want)


def test_joint_max_flows_by_hand():
    """Two layers, two tokens: each path source -> (1, m) -> sink carries the smaller of its two
    capacities, so the flows are sums of minima (worked out by hand), one copy per problem."""
    icap = np.array([[[3, 1], [0, 2]],          # layer 1: icap[0, i, j], edge (0, j) -> (1, i)
                     [[1, 4], [2, 2]]])         # layer 2: edge (1, m) -> (2, i)
    got = att._joint_max_flows(icap, np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]))
    # sink 0: from 0 min(3,1) + min(0,4) = 1; from 1 min(1,1) + min(2,4) = 3
    # sink 1: from 0 min(3,2) + min(0,2) = 2; from 1 min(1,2) + min(2,2) = 3
    np.testing.assert_array_equal(got, [1, 3, 2, 3])


def test_flow_refuses_capacities_beyond_int32():
    maps = np.full((2, 3, 3), 3.0)
    with pytest.raises(InputError, match="32-bit integers"):
        attention_flow(maps, add_identity=False)
    attention_flow(maps, add_identity=True)            # normalised rows: fine


@pytest.mark.parametrize("layers", [[-1], [0, 2], 1, np.array([3, -4])])
def test_flow_layers_solves_only_those(layers):
    maps = random_maps(9, 4, 5, zeros=0.2)
    full = attention_flow(maps, rows=[0, 3])
    got = attention_flow(maps, rows=[0, 3], layers=layers)
    keep = np.unique(np.atleast_1d(layers) % 4)
    np.testing.assert_array_equal(got[keep], full[keep])
    assert np.isnan(np.delete(got, keep, axis=0)).all()


@pytest.mark.parametrize("layers,message", [
    ([4], r"layers=\[4\] out of range for maps of 4 layers"),
    ([], "layers is empty"),
    ([0.5], "layers must hold integer layer indices")])
def test_flow_bad_layers(layers, message):
    with pytest.raises(InputError, match=message):
        attention_flow(random_maps(9, 4, 3), layers=layers)
