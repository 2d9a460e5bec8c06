r"""Exercises 16.2 and 16.3 (chapter 16, decoder LMs): the causal rollout, and ALTI-Logit's
explanation of :math:`\lambda_t - \lambda_f` from its terms.

**16.2.** A causal map :math:`C` is lower-triangular (:math:`C_{ij} = 0` for :math:`j > i`).
After row normalisation, :math:`(C B)_{ij} = \sum_k C_{ik} B_{kj}` has a non-zero term only
for :math:`j \le k \le i`, so the product of two such maps is lower-triangular, its rows sum
to :math:`\sum_k C_{ik} \sum_j B_{kj} = 1`, and its top-left :math:`m \times m` block is the
product of the two blocks (the rollout of a prefix). The decoder's rollout of the maps that
already hold the residual (ALTI, Value Zeroing) normalises each layer's rows and adds no
identity (:func:`cmixlib.methods.decoder_maps.alti_rollout`: ``rollout(maps,
add_identity=False)``), current layer on the left.

**16.3.** With the final norm linearised (:mod:`cmixlib.methods.alti_logit`), each logit is
a sum of terms :math:`\tilde u \cdot v` with :math:`\tilde u` linear in the unembedding row
:math:`u`; so the terms of :math:`\lambda_t - \lambda_f` are the target's terms minus the
foil's. Row :math:`p` of the explanation is

.. math:: E_{p\cdot} = S^{0}_{p\cdot} + \sum_{\ell \ge 1} S^{\ell}_{p\cdot}\, R^{\ell-1}
          + e_p\, \mathbf{1}_p ,

:math:`S^\ell = S^\ell_t - S^\ell_f` the attention terms of layer :math:`\ell` per source
token, :math:`R^{\ell-1}` the ALTI rollout of the layers below (layer 0's sources are the input
tokens), :math:`e_p` the embedding term of row :math:`p`, put on token :math:`p` itself.
Because :math:`R`'s rows sum to 1, the row adds up to :math:`\sum_\ell \sum_k S^\ell_{pk} +
e_p`: the attention and embedding part of the logit difference.

Tolerances: an answer computed in float32 is accepted. An entry of a product of :math:`L`
maps accumulates at most about :math:`L n` roundings of entries of size at most the inputs'
largest, so the tolerance is :math:`8 L n\, \varepsilon_{32}` times that size
(:func:`_tolerance`); every mistake the checkers name changes some entry by far more.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .checking import CheckResult, _call, _check_shape, _close, _diagnose, _report_diff

EPS32 = float(np.finfo(np.float32).eps)


def _tolerance(layers: int, n: int, scale: float = 1.0) -> float:
    """Absolute tolerance for a float32 computation of ``layers`` chained products of
    (n, n) maps with entries of size up to ``scale`` (module docstring)."""
    return 8 * layers * n * EPS32 * max(scale, 1.0)


def _rownorm(m: np.ndarray) -> np.ndarray:
    return m / m.sum(-1, keepdims=True)


def _chain(m: np.ndarray, left: bool = True) -> np.ndarray:
    out = np.empty_like(m)
    out[0] = m[0]
    for k in range(1, len(m)):
        out[k] = m[k] @ out[k - 1] if left else out[k - 1] @ m[k]
    return out


# ------------------------------------------------------------------------------------------
# 16.2: the causal rollout
# ------------------------------------------------------------------------------------------

def reference_causal_rollout(maps) -> np.ndarray:
    """The decoder's rollout of maps that hold the residual: rows normalised, no identity,
    ``out[l] = C~^l @ ... @ C~^0`` (:func:`cmixlib.methods.aggregation.rollout` with
    ``add_identity=False``), shape (L, n, n)."""
    from cmixlib.methods.aggregation import rollout

    return np.asarray(rollout(np.asarray(maps, dtype=float), add_identity=False), dtype=float)


def causal_maps(layers: int, n: int, seed: int) -> np.ndarray:
    """(layers, n, n) random non-negative lower-triangular maps, a few large entries per row,
    rows **not** normalised (each row scaled by a factor in 0.5..3)."""
    rng = np.random.default_rng(seed)
    m = np.tril(rng.random((layers, n, n)) ** 3 + 1e-3)
    return m * rng.uniform(0.5, 3.0, (layers, n, 1))


def _decoder_alti_maps(seed: int) -> np.ndarray:
    """The per-layer ALTI maps (L, n, n) of a tiny random llama-style decoder on random ids."""
    import torch

    import cmixlib
    from cmixlib.forward.decoder import random_decoder

    model = random_decoder("llama", seed=seed)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, model.config.vocab_size, (7,), generator=g)
    return np.asarray(cmixlib.context_mixing(model, None, {"input_ids": ids},
                                             ["alti_layer"])["alti_layer"], dtype=float)


def _rollout_mistakes(arr: np.ndarray) -> dict[str, np.ndarray]:
    """What each usual slip of the causal rollout returns for the maps ``arr``."""
    from cmixlib.methods.aggregation import rollout

    raw = _chain(arr)
    soft = np.exp(arr - arr.max(-1, keepdims=True))
    return {
        "the identity was added: ALTI and Value Zeroing maps already hold the residual "
        "(their diagonal), so the decoder's rollout adds no identity (0.5 C + 0.5 I would "
        "count the residual twice).": rollout(arr, add_identity=True),
        "the product is in the wrong order: the current layer goes on the LEFT "
        "(R^l = C~^l R^(l-1)).": _chain(_rownorm(arr), left=False),
        "the rows were not normalised before multiplying: divide each layer's rows by their "
        "sum first.": raw,
        "the rows were normalised after multiplying, not before: normalise each layer's map, "
        "then multiply (the unnormalised row sums of the lower layers weight the paths).":
            _rownorm(raw),
        "the layers were not chained: each output layer multiplies all the layers up to it.":
            _rownorm(arr),
        "a softmax normalised the rows: it gives every zero above the diagonal a positive "
        "weight (exp(0) = 1), so token i would receive from tokens after it; divide by the "
        "row sum instead.": _chain(_rownorm(soft)),
    }


def check_causal_rollout(student_fn: Callable, *, seed: int = 0,
                         verbose: bool = True) -> CheckResult:
    """``student_fn(maps) -> (L, n, n)``: the rollout of causal (lower-triangular,
    non-negative) maps that hold the residual: each layer's rows normalised, no identity,
    current layer on the left. Tested on random maps whose rows do not sum to 1 and on the
    ALTI maps of a tiny random decoder; checks that the result is lower-triangular, that its
    rows sum to 1 and that the rollout of the first m tokens is its top-left block (the
    derivation), and names the usual slips (identity added, wrong order, rows not normalised
    or normalised after multiplying, layers not chained, a softmax, a transposed map)."""
    res = CheckResult("check_causal_rollout")
    cases = [("random lower-triangular maps, rows not normalised", causal_maps(4, 6, seed))]
    try:
        cases.append(("ALTI maps of a tiny random decoder", _decoder_alti_maps(seed)))
    except Exception:  # noqa: BLE001 - the random case is enough
        pass
    for label, arr in cases:
        res.begin(label)
        want = reference_causal_rollout(arr)
        L, n = arr.shape[0], arr.shape[-1]
        atol = _tolerance(L, n)
        got = _call(res, student_fn, arr.copy())
        if got is None:
            break
        if got.shape == want.shape[1:]:
            res.fail(f"{label}: you returned one (n, n) matrix; return every layer's rollout, "
                     f"shape {want.shape}.")
            break
        if not _check_shape(res, got, want.shape, f"[{label}] (layer, receiving i, source j)"):
            break
        upper = np.abs(np.triu(got, 1)).max() if n > 1 else 0.0
        if upper <= atol:
            res.ok(f"{label}: nothing above the diagonal (token i receives only from j <= i)")
        else:
            res.fail(f"{label}: the upper triangle is not zero (largest entry {upper:.3g}): "
                     f"token i can only receive from tokens j <= i, and a product of "
                     f"lower-triangular maps is lower-triangular.")
        rows = got.sum(-1)
        if np.allclose(rows, 1.0, atol=atol):
            res.ok(f"{label}: rows sum to 1")
        else:
            res.fail(f"{label}: rows sum to {rows.min():.3f}..{rows.max():.3f}, not 1.")
        m = n - 2
        block = _call(res, student_fn, arr[:, :m, :m].copy())
        if block is None:
            break
        if block.shape == (L, m, m) and _close(block, got[:, :m, :m], atol):
            res.ok(f"{label}: your rollout of the first {m} tokens is the top-left block of "
                   f"yours (a prefix needs no run of its own)")
        else:
            res.fail(f"{label}: your rollout of the first {m} tokens is not the top-left "
                     f"{m} x {m} block of your rollout of all {n}; for causal maps it must be.")
        if _close(got, want, atol=atol):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"layer {ix[0] + 1}, row {ix[1]}, col {ix[2]}",
                     atol)
        candidates = {cause: wrong for cause, wrong in _rollout_mistakes(arr).items()
                      if not _close(np.asarray(wrong, dtype=float), want, atol)}
        _diagnose(res, got, candidates, atol, want=want, layers=True)
        # the next case still runs: the rubric gives points per case
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 16.3: ALTI-Logit's explanation of lambda_t - lambda_f from its terms
# ------------------------------------------------------------------------------------------

def _terms(d) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(d["sources"], dtype=float), np.asarray(d["embedding"], dtype=float)


def _explain(S: np.ndarray, e: np.ndarray, R: np.ndarray, p: int, *, shift: int = 1,
             embed_at: int | None = None, carry: bool = True) -> np.ndarray:
    """Row p of sum_l S^l R^(l - shift) (R^(-1) = I; ``carry`` False: no rollout) plus e_p at
    column ``embed_at`` (default p; -1: none)."""
    row = np.zeros(S.shape[-1])
    for layer in range(len(S)):
        k = layer - shift
        row += S[layer, p] @ R[k] if carry and k >= 0 else S[layer, p]
    col = p if embed_at is None else embed_at
    if col >= 0:
        row[col] += e[p]
    return row


def reference_logit_explanation(target, foil, rollout, p: int) -> np.ndarray:
    """Row ``p`` of ALTI-Logit's explanation of lambda_t - lambda_f (module docstring), (n,).
    ``target`` / ``foil``: mappings with ``sources`` (L, n, n), layer l's attention terms of that
    logit per receiving row and source token, and ``embedding`` (n,), each row's embedding
    term; ``rollout`` (L, n, n): the ALTI rollout R^l. Equals
    :attr:`cmixlib.methods.alti_logit.AltiLogit.explanation` ``[p]`` of the run with the foil."""
    (St, et), (Sf, ef) = _terms(target), _terms(foil)
    return _explain(St - Sf, et - ef, np.asarray(rollout, dtype=float), int(p))


def logit_terms(layers: int, n: int, seed: int) -> tuple[dict, dict, np.ndarray]:
    """Random terms of a target and a foil (causal ``sources`` (L, n, n), ``embedding`` (n,))
    and a random ALTI-like rollout: lower-triangular, rows summing to 1."""
    rng = np.random.default_rng(seed)

    def one() -> dict:
        return {"sources": np.tril(rng.normal(size=(layers, n, n))),
                "embedding": rng.normal(size=n)}

    return one(), one(), reference_causal_rollout(causal_maps(layers, n, seed + 11))


def _decoder_terms(seed: int) -> tuple[dict, dict, np.ndarray, int]:
    """The target's and the foil's terms (each logit alone) and the ALTI rollout of a tiny
    random decoder, and the last position."""
    import torch

    from cmixlib.forward.decoder import random_decoder
    from cmixlib.methods.alti_logit import explain_logit

    model = random_decoder("llama", seed=seed)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(1, vocab, (7,), generator=g)
    t, f = (int(v) for v in torch.randperm(vocab, generator=g)[:2])
    alone = [explain_logit(model, None, {"input_ids": ids}, w) for w in (t, f)]
    terms = [{"sources": a.sources, "embedding": a.embedding} for a in alone]
    return terms[0], terms[1], alone[0].rollout, len(ids) - 1


def _explanation_mistakes(target, foil, R: np.ndarray, p: int) -> dict[str, np.ndarray]:
    """What each usual slip of the explanation returns (row p, (n,))."""
    (St, et), (Sf, ef) = _terms(target), _terms(foil)
    S, e = St - Sf, et - ef
    n = S.shape[-1]
    out = {
        "the foil's terms were added, not subtracted: the explanation is of lambda_t - "
        "lambda_f, so the foil's terms enter with a minus sign.":
            _explain(St + Sf, et + ef, R, p),
        "the foil was left out: the explanation is of lambda_t - lambda_f, not of the "
        "target's logit alone.": _explain(St, et, R, p),
        "the embedding term is missing: the authors' explanation adds the embedding term "
        "e_p to token p itself.": _explain(S, e, R, p, embed_at=-1),
        "the embedding term was put on the BOS (column 0): it is the predicting token's "
        "own embedding, so it goes to column p.": _explain(S, e, R, p, embed_at=0),
        "each layer was carried by its own rollout R^l: layer l's sources are the tokens "
        "at its input, the output of layer l - 1, so R^(l-1) (and layer 0's sources are the "
        "input tokens themselves).": _explain(S, e, R, p, shift=0),
        "the terms were not carried to the input tokens: layer l's terms are per token at "
        "layer l's input; multiply them by the rollout R^(l-1) of the layers below.":
            _explain(S, e, R, p, carry=False),
        "the rollout is transposed: row p of S^l R^(l-1), R's row k receiving and column j "
        "sending.": _explain(S, e, np.swapaxes(R, -1, -2), p),
    }
    if p != n - 1:
        out["the last row was explained instead of row p."] = _explain(S, e, R, n - 1)
    return out


def check_logit_explanation(student_fn: Callable, *, seed: int = 0,
                            verbose: bool = True) -> CheckResult:
    """``student_fn(target, foil, rollout, p) -> (n,)``: row ``p`` of ALTI-Logit's explanation
    of lambda_t - lambda_f from the target's and the foil's terms (each a mapping with
    ``sources`` (L, n, n) and ``embedding`` (n,)) and the ALTI rollout (L, n, n). Tested on
    random terms (p inside the sentence) and on a tiny random decoder (p the last position);
    checks that the row adds up to the attention and embedding part of the logit difference
    (the derivation) and names the usual slips (the foil's sign, the foil left out, the
    embedding term missing or on the BOS, the rollout of the wrong layer, no rollout, a
    transposed rollout, the last row)."""
    res = CheckResult("check_logit_explanation")
    rng = np.random.default_rng(seed)
    n = 7
    t, f, R = logit_terms(4, n, seed)
    cases = [("random terms", t, f, R, int(rng.integers(2, n - 1)))]
    try:
        cases.append(("a tiny random decoder", *_decoder_terms(seed)))
    except Exception:  # noqa: BLE001 - the random case is enough
        pass
    for label, t, f, R, p in cases:
        res.begin(label)
        want = reference_logit_explanation(t, f, R, p)
        (St, et), (Sf, ef) = _terms(t), _terms(f)
        scale = float(np.abs(np.concatenate([St.ravel(), Sf.ravel(), et, ef])).max())
        atol = _tolerance(R.shape[0], R.shape[-1], scale)
        got = _call(res, student_fn, {k: np.array(v) for k, v in t.items()},
                    {k: np.array(v) for k, v in f.items()}, np.array(R), p)
        if got is None:
            break
        if got.ndim == 2 and got.shape == R.shape[1:]:
            res.fail(f"{label}: you returned an (n, n) matrix; return row p = {p} only, "
                     f"shape {want.shape}.")
            break
        if not _check_shape(res, got, want.shape, f"[{label}] (input token j)"):
            break
        part = float((St - Sf)[:, p].sum() + (et - ef)[p])
        if abs(float(got.sum()) - part) <= atol * len(got):
            res.ok(f"{label}: the row adds up to the attention and embedding part of "
                   f"lambda_t - lambda_f at p (the rollout's rows sum to 1)")
        else:
            res.fail(f"{label}: the row adds up to {float(got.sum()):.4f}, but the attention "
                     f"and embedding terms of lambda_t - lambda_f at p add up to {part:.4f}; "
                     f"carrying by a rollout whose rows sum to 1 keeps every sum.")
        if _close(got, want, atol=atol, rtol=1e-6):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, token j={ix[0]}", atol)
        candidates = {cause: wrong for cause, wrong in _explanation_mistakes(t, f, R, p).items()
                      if not _close(np.asarray(wrong), want, atol)}
        _diagnose(res, got, candidates, atol)
    return res.finish(verbose)
