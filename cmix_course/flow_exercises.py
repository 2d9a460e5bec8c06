"""Exercise 3.2: attention flow, one entry, as a maximum flow in the layered graph.

The graph has ``L + 1`` layers of ``n`` nodes (layer 0 is the input); the edge from token ``k``
at layer ``l - 1`` to token ``i`` at layer ``l`` has capacity ``M~^l[i, k]`` (the row is the
receiving token), with ``M~ = M`` or ``(M + I) / 2`` when ``add_identity``. The answer is the
maximum flow from input token ``j`` to token ``i`` at the last layer, un-normalised
(:func:`cmixlib.methods.aggregation.attention_flow`, entry ``[L - 1, i, j]``).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .checking import CheckResult, _call, _one_number, _tiny_bert, _tiny_inputs

#: Exercise 3.2's example by hand: two layers, three tokens, maps already prepared (rows sum to
#: 1, the identity mixed in), flow from input token 0 to token 2 at layer 2.
HAND_MAPS = np.array([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.1, 0.3, 0.6]],
                      [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.4, 0.4, 0.2]]])
HAND_SINK, HAND_SOURCE = 2, 0
#: Tolerance: the library solves with integer capacities scaled by 1e9 (error < 1e-8 per edge).
ATOL = 1e-6


def _prepared(maps: np.ndarray, add_identity: bool) -> np.ndarray:
    maps = np.asarray(maps, dtype=float)
    return 0.5 * maps + 0.5 * np.eye(maps.shape[-1]) if add_identity else maps


def reference_flow(maps: np.ndarray, i: int, j: int, add_identity: bool) -> float:
    """The maximum flow from input token ``j`` to token ``i`` at the last layer
    (:func:`cmixlib.methods.aggregation.attention_flow`, un-normalised)."""
    from cmixlib.methods.aggregation import attention_flow

    return float(attention_flow(np.asarray(maps, dtype=float), add_identity=add_identity,
                                rows=[i])[-1, i, j])


def widest_path(maps: np.ndarray, i: int, j: int, add_identity: bool) -> float:
    """The best single path from ``j`` to ``i``: the largest narrowest edge (a likely mistake)."""
    m = _prepared(maps, add_identity)
    best = np.zeros(m.shape[-1])
    best[j] = np.inf
    for layer in m:                       # best[k]: widest path into token k at this layer
        best = np.max(np.minimum(best[None, :], layer), axis=1)
    return float(best[i])


def random_flow_maps(layers: int, n: int, seed: int) -> np.ndarray:
    """(layers, n, n) random row-stochastic maps, sparse and peaked so that narrow edges bind
    (flow, rollout and the best single path differ)."""
    rng = np.random.default_rng(seed)
    m = rng.random((layers, n, n)) ** 3 * (rng.random((layers, n, n)) < 0.5)
    m[:, np.arange(n), rng.integers(n, size=n)] += 0.05      # no empty row
    return m / m.sum(-1, keepdims=True)


def _pair(maps: np.ndarray, add_identity: bool, rng: np.random.Generator) -> tuple[int, int]:
    """A sink i and a source j (i != j) at which every likely mistake gives another value than
    the right one (the first such pair in a random order), so that the checker can name it."""
    n = maps.shape[-1]
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    for k in rng.permutation(len(pairs)):
        i, j = pairs[k]
        want = reference_flow(maps, i, j, add_identity)
        if all(abs(v - want) > 1e-3 for v in _causes(maps, i, j, add_identity).values()):
            return i, j
    return pairs[0]


def _cases(seed: int) -> list[tuple[str, np.ndarray, int, int, bool]]:
    rng = np.random.default_rng(seed + 100)
    out = [("the 3-token example by hand (maps prepared), add_identity=False", HAND_MAPS,
            HAND_SINK, HAND_SOURCE, False)]
    for label, layers, n, add in (("random maps, add_identity=False", 3, 5, False),
                                  ("random maps, add_identity=True", 4, 5, True)):
        maps = random_flow_maps(layers, n, seed + layers)
        out.append((label, maps, *_pair(maps, add, rng), add))
    try:
        model = _tiny_bert(seed, layers=3)
        _, res = _tiny_inputs(model, seed=seed)
        att = torch.stack(res.attentions)[:, 0].mean(1).double().numpy()
        out.append(("tiny BERT attention (mean over heads), add_identity=True", att,
                    *_pair(att, True, rng), True))
    except Exception:  # noqa: BLE001 - the other cases are enough
        pass
    return out


def _causes(maps: np.ndarray, i: int, j: int, add_identity: bool) -> dict[str, float]:
    """The value each likely mistake gives, by the message that names it."""
    from cmixlib.methods.aggregation import rollout

    m = np.asarray(maps, dtype=float)
    identity = ("the identity was not added although add_identity=True"
                if add_identity else "the identity was added although add_identity=False")
    out = {
        "the capacities are transposed: the edge from token k at layer l-1 to token i at layer "
        "l carries M~^l[i, k] (the row is the receiving token), not M~^l[k, i].":
            reference_flow(np.swapaxes(m, -1, -2), i, j, add_identity),
        "source and sink are swapped: the flow goes from input token j (layer 0) to token i at "
        "the last layer.": reference_flow(m, j, i, add_identity),
        "this is rollout's entry (the sum over all paths of the product of their weights), "
        "not a maximum flow: a path carries at most its narrowest edge, and the flows of "
        "several paths add up.": float(rollout(m, add_identity=add_identity)[-1, i, j]),
        "this is the best single path (its narrowest edge); a maximum flow sends flow along "
        "several paths at once.": widest_path(m, i, j, add_identity),
        f"{identity}.": reference_flow(m, i, j, not add_identity),
        "only the last layer's map was used: the graph has L + 1 layers of nodes, from the "
        "input (layer 0) to the last layer.": float(_prepared(m, add_identity)[-1, i, j]),
    }
    if add_identity:
        out["(M + I) was not row-normalised: with add_identity the capacities are "
            "(M + I) / 2."] = reference_flow(m + np.eye(m.shape[-1]), i, j, False)
    row = np.array([reference_flow(m, i, k, add_identity) for k in range(m.shape[-1])])
    out["the value was divided by the row's sum; return the raw maximum flow."] = \
        float(row[j] / row.sum())
    return out


def check_attention_flow(student_fn: Callable, *, seed: int = 0,
                         verbose: bool = True) -> CheckResult:
    """``student_fn(maps, i, j, add_identity) -> float``: the maximum flow from input token
    ``j`` to token ``i`` at the last layer of row-stochastic maps ``(L, n, n)``.

    Tested on the statement's 3-token example, on random maps with both settings and on the
    attention maps of a tiny random BERT; a wrong value is matched against the usual
    mistakes (transposed capacities, rollout's product, the best single path, the identity,
    source and sink swapped, one layer only, a normalised row).
    """
    res = CheckResult("check_attention_flow")
    for label, maps, i, j, add_identity in _cases(seed):
        res.begin(label)
        want = reference_flow(maps, i, j, add_identity)
        got = _call(res, student_fn, maps.copy(), i, j, add_identity)
        if got is None:
            break
        value = _one_number(res, got, label, "the maximum flow")
        if value is None:
            break
        where = f"{label}, flow from token j={j} to token i={i}"
        if np.isclose(value, want, atol=ATOL, rtol=1e-6):
            res.matched(label, f" ({value:.4f})")
            continue
        res.fail(f"{where}: yours {value:.6f}, expected {want:.6f}.")
        for cause, wrong in _causes(maps, i, j, add_identity).items():
            if np.isclose(value, wrong, atol=ATOL, rtol=1e-6) and \
                    not np.isclose(wrong, want, atol=ATOL, rtol=1e-6):
                res.info(f"likely cause: {cause}")
                break
        # the next case still runs: a rubric gives points per case
    return res.finish(verbose)
