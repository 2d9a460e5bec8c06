"""MDL online-code probing: units, compression on easy vs random labels, determinism."""
import math

import numpy as np
import pytest

from cmixlib.metrics.probing import (DEFAULT_BLOCKS, VZ_BLOCKS, block_boundaries, mdl_by_layer,
                                     mdl_probe)


def _data(n=600, d=16, seed=0, signal=3.0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.normal(size=(n, d)) + signal * (2 * y - 1)[:, None] / math.sqrt(d)
    return X.astype(np.float32), y


def test_block_boundaries():
    assert block_boundaries(2000, DEFAULT_BLOCKS) == [2, 4, 8, 16, 32, 64, 125, 250, 500, 1000, 2000]
    assert block_boundaries(1000, VZ_BLOCKS) == [8, 16, 32, 62, 125, 250, 500, 1000]
    b = block_boundaries(50)  # tiny N: duplicates dropped, strictly increasing, ends at N
    assert b[0] >= 1 and b[-1] == 50 and all(x < y for x, y in zip(b, b[1:]))


def test_units_are_bits_and_uniform_first_block():
    X, y = _data()
    r = mdl_probe(X, y, seed=1)
    first = r.blocks.iloc[0]
    assert first.cost_bits == pytest.approx(first.n_eval * math.log2(2))
    assert r.uniform_codelength == pytest.approx(len(y) * 1.0)
    assert r.codelength == pytest.approx(r.blocks.cost_bits.sum())
    assert r.compression == pytest.approx(r.uniform_codelength / r.codelength)
    assert r.blocks.n_eval.sum() == len(y)
    # three classes: the uniform code is log2(3) bits per example
    rng = np.random.default_rng(0)
    r3 = mdl_probe(rng.normal(size=(200, 4)), rng.integers(0, 3, 200), num_classes=3, seed=0)
    assert r3.uniform_codelength == pytest.approx(200 * math.log2(3))
    assert r3.blocks.iloc[0].cost_bits == pytest.approx(r3.blocks.iloc[0].n_eval * math.log2(3))


def test_separable_compresses_much_better_than_random():
    X, y = _data(signal=8.0)
    good = mdl_probe(X, y, seed=0)
    rng = np.random.default_rng(5)
    rand = mdl_probe(X, rng.integers(0, 2, len(y)), seed=0)
    assert good.compression > 3.0
    assert 0.6 < rand.compression <= 1.1
    assert good.compression > 3 * rand.compression


def test_deterministic_under_seed():
    X, y = _data(n=300)
    a = mdl_probe(X, y, seed=3)
    b = mdl_probe(X, y, seed=3)
    assert a.codelength == b.codelength
    c = mdl_probe(X, y, seed=4)
    assert c.codelength != a.codelength


def test_linear_probe_and_by_layer():
    X, y = _data(n=300)
    df = mdl_by_layer([X, np.zeros_like(X)], y, hidden=0, seed=0)
    assert list(df.layer) == [0, 1]
    assert df.compression[0] > df.compression[1]
    assert {"codelength_bits", "uniform_bits", "compression"} <= set(df.columns)


def test_bad_input():
    with pytest.raises(ValueError):
        mdl_probe(np.zeros((5, 2)), [0, 1, 2])
