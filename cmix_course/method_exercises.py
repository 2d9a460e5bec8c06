"""Exercises on the methods built on the layer: rollout (3), GlobEnc's N-Enc (5), one row of
ALTI (6) and gradient × input (8)."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from cmixlib.models.arch import layer_parts
from .checking import (CheckResult, _call, _check_normalised_row, _check_shape, _close, _diagnose,
                       _report_diff, _tiny_bert, _tiny_inputs)

# ------------------------------------------------------------------------------------------
# 3. rollout
# ------------------------------------------------------------------------------------------

def reference_rollout(maps: np.ndarray, add_identity: bool = False) -> np.ndarray:
    """Rollout with the book's convention (:func:`cmixlib.methods.aggregation.rollout`)."""
    from cmixlib.methods.aggregation import rollout

    return np.asarray(rollout(maps, add_identity=add_identity), dtype=float)


def random_maps(layers: int, n: int, seed: int) -> np.ndarray:
    """(layers, n, n) random row-stochastic maps with a few large entries (what the rollout
    checker feeds the reader's function)."""
    rng = np.random.default_rng(seed)
    m = rng.random((layers, n, n)) ** 3
    return m / m.sum(-1, keepdims=True)


def check_rollout(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(maps, add_identity) -> (L, n, n)``: rollout of row-stochastic maps (L, n, n).

    Output layer l is M~^l @ ... @ M~^1 (current layer on the left), where M~ = M, or
    (M + I) row-normalised when ``add_identity`` is True. Tested on random maps with both
    settings, and on real attention maps of a tiny BERT.
    """
    res = CheckResult("check_rollout")
    cases = [("random maps, add_identity=False", random_maps(4, 6, seed), False),
             ("random maps, add_identity=True", random_maps(3, 5, seed + 1), True)]
    try:
        model = _tiny_bert(seed, layers=3)
        _, out = _tiny_inputs(model, seed=seed)
        att = torch.stack(out.attentions)[:, 0].mean(1).double().numpy()
        cases.append(("tiny BERT attention (mean over heads), add_identity=True", att, True))
    except Exception:  # noqa: BLE001 - the two random cases are enough
        pass
    for label, maps, add_identity in cases:
        res.begin(label)
        want = reference_rollout(maps, add_identity)
        got = _call(res, student_fn, maps.copy(), add_identity)
        if got is None:
            break
        if got.shape == want.shape[1:]:
            res.fail(f"{label}: you returned one (n, n) matrix; return every layer's rollout, "
                     f"shape {want.shape}.")
            if _close(got, want[-1], 1e-6):
                res.info("it equals the last layer's rollout, so only the stacking is missing.")
            break
        if not _check_shape(res, got, want.shape, f"[{label}]"):
            break
        rows = got.sum(-1)
        if np.allclose(rows, 1.0, atol=1e-6):
            res.ok(f"{label}: rows sum to 1")
        else:
            res.fail(f"{label}: rows sum to {rows.min():.3f}..{rows.max():.3f}, not 1.")
        if _close(got, want, atol=1e-6):
            res.matched(label)
            continue
        _report_diff(res, got, want, lambda ix: f"layer {ix[0] + 1}, row {ix[1]}, col {ix[2]}", 1e-6)
        arr = np.asarray(maps, dtype=float)
        base = arr + np.eye(arr.shape[-1]) if add_identity else arr
        base_n = base / base.sum(-1, keepdims=True)
        wrong_order = np.empty_like(base_n)
        wrong_order[0] = base_n[0]
        unnorm = np.empty_like(base)
        unnorm[0] = base[0]
        for k in range(1, len(base)):
            wrong_order[k] = wrong_order[k - 1] @ base_n[k]
            unnorm[k] = base[k] @ unnorm[k - 1]
        candidates = {
            "the product is in the wrong order: the current layer goes on the LEFT (R^l = M^l R^(l-1)).":
                wrong_order,
            "(M + I) was not row-normalised before multiplying.": unnorm,
            "the identity was not added although add_identity=True." if add_identity else
            "the identity was added although add_identity=False.": reference_rollout(maps, not add_identity),
        }
        if got.shape == want.shape and np.allclose(got[0], arr[0] if not add_identity else base_n[0], atol=1e-6):
            candidates["the layers were not chained: each output layer must multiply all earlier ones."] = \
                base_n
        _diagnose(res, got, candidates, atol=1e-6, want=want, layers=True)
        # the next case still runs: a rubric gives points per case
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 5. GlobEnc's N-Enc
# ------------------------------------------------------------------------------------------

def reference_nenc(T: torch.Tensor, q: torch.Tensor, ln2: torch.nn.LayerNorm) -> torch.Tensor:
    r"""N-Enc, :math:`\lVert T'_i(x_j) \rVert_2` with
    :math:`T'_i(x_j) = \gamma_2 \odot (T_i(x_j) - \mu(T_i(x_j))) / \sigma(u_i)`, shape (n, n).

    ``T`` (n, n, d): the LN1 output split over source tokens (:math:`\sum_j T_i(x_j)` plus the
    attention-output and LN biases is :math:`y_i`); ``q`` (n, d): the real LN2 input
    :math:`u_i = y_i + \mathrm{FFN}(y_i)`, whose scale :math:`\sigma(u_i)` divides every vector
    of row i; :math:`\beta_2` is left out, as in :func:`cmixlib.methods.norms.globenc_layer`.
    """
    s = torch.sqrt(q.var(-1, unbiased=False, keepdim=True) + ln2.eps)          # (n, 1)
    centred = T - T.mean(-1, keepdim=True)
    return torch.linalg.vector_norm(ln2.weight * centred / s[:, None, :], dim=-1)


@torch.no_grad()
def check_nenc(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(T, u, ln2) -> (n, n)``: GlobEnc's un-normalised N-Enc map of one layer.

    ``T`` (n, n, d) holds the LN1 vectors :math:`T_i(x_j)`, ``u`` (n, d) the real LN2 input
    :math:`u_i` and ``ln2`` the layer's second LayerNorm. Each vector goes through LN2's linear part (centred,
    times gamma, divided by the standard deviation of the *real* LN2 input of its row, no beta);
    the entry (i, j) is the L2 norm of the result. Do not normalise the rows.
    """
    res = CheckResult("check_nenc")
    model = _tiny_bert(seed)
    ln2 = layer_parts(model)[0].ln2
    d = ln2.normalized_shape[0]
    g = torch.Generator().manual_seed(seed + 3)
    n = 5
    T = torch.randn(n, n, d, generator=g) * torch.linspace(0.3, 2.0, n)[None, :, None] + 0.2
    y = T.sum(1)
    q = y + 1.5 * torch.randn(n, d, generator=g)                # the FFN's output changes the scale
    want_t = reference_nenc(T, q, ln2)
    want = want_t.double().numpy()
    got = _call(res, student_fn, T.clone(), q.clone(), ln2)
    if got is not None and _check_shape(res, got, want.shape, "(receiving token i, source token j)"):
        if (got < -1e-6).any():
            res.fail("negative entries: every entry is a vector norm.")
        if _close(got, want, atol=1e-5):
            res.ok("matches the reference N-Enc map")
        else:
            _report_diff(res, got, want, lambda ix: f"row i={ix[0]}, column j={ix[1]}", 1e-5)
            centred = T - T.mean(-1, keepdim=True)
            s_q = torch.sqrt(q.var(-1, unbiased=False, keepdim=True) + ln2.eps)[:, None, :]
            s_y = torch.sqrt(y.var(-1, unbiased=False, keepdim=True) + ln2.eps)[:, None, :]
            own = torch.sqrt(T.var(-1, unbiased=False, keepdim=True) + ln2.eps)
            norm = lambda v: torch.linalg.vector_norm(v, dim=-1).double().numpy()  # noqa: E731
            _diagnose(res, got, {
                "the rows were normalised; the exercise asks for the raw norms.":
                    (want_t / want_t.sum(-1, keepdim=True)).double().numpy(),
                "the vectors were divided by the std of y_i (the sum of T) instead of the real LN2 input "
                "u_i = y_i + FFN(y_i): the FFN's output is part of what LN2 normalises.":
                    norm(ln2.weight * centred / s_y),
                "beta_2 (ln2.bias) was added to every vector; leave it out.":
                    norm(ln2.weight * centred / s_q + ln2.bias),
                "the vectors were not centred (subtract each vector's own mean over d).":
                    norm(ln2.weight * T / s_q),
                "gamma_2 (ln2.weight) is missing.": norm(centred / s_q),
                "each vector was divided by its own std; all vectors of row i share sigma(u_i).":
                    norm(ln2.weight * centred / own),
            }, atol=1e-5, want=want)
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 6. one row of ALTI
# ------------------------------------------------------------------------------------------

def reference_alti_row(T: torch.Tensor, y: torch.Tensor, *, p: int = 1, clamp: bool = True,
                       normalize: bool = True) -> torch.Tensor:
    r"""ALTI's row: :math:`c_{ij} \propto \max(0, \lVert y_i\rVert_1 - \lVert y_i - T_i(x_j)\rVert_1)`.

    ``T`` (n, d), ``y`` (d,). ``p=2`` / ``clamp=False`` / ``normalize=False`` give the usual
    mistakes, used to diagnose the reader's answer.
    """
    prox = torch.linalg.vector_norm(y, ord=p) - torch.linalg.vector_norm(y[None, :] - T, ord=p, dim=-1)
    if clamp:
        prox = prox.clamp(min=0.0)
    return prox / prox.sum() if normalize else prox


@torch.no_grad()
def check_alti_row(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(T, y) -> (n,)``: ALTI's normalised contributions to one receiving token.

    ``T`` (n, d) holds the transformed vectors :math:`T_i(x_j)`, ``y`` (d,) the LN1 output
    :math:`y_i`. Score each j by its proximity :math:`\max(0, \lVert y\rVert_1 - \lVert y -
    T_j\rVert_1)` (L1 norms) and normalise the row to sum to 1.
    """
    res = CheckResult("check_alti_row")
    g = torch.Generator().manual_seed(seed + 5)
    d = 16
    for trial, n in enumerate((6, 4)):
        T = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.linspace(0.5, 1.5, n, dtype=torch.float64)[:, None]
        T[-1] = -0.5 * T[0]                  # pulls against T_0: some proximities are negative (clamped)
        y = T.sum(0) + 0.1 * torch.randn(d, generator=g, dtype=torch.float64)  # plus an unattributed bias
        want_t = reference_alti_row(T, y)
        want = want_t.numpy()
        got = _call(res, student_fn, T.clone(), y.clone())
        matched = _check_normalised_row(res, got, want, f"trial {trial + 1}", ": one score per source token", 1e-6)
        if matched is None:
            break
        if matched:
            continue
        l1 = torch.linalg.vector_norm(T, ord=1, dim=-1)
        _diagnose(res, got, {
            "the row is not normalised to sum to 1.": reference_alti_row(T, y, normalize=False).numpy(),
            "negative proximities were kept: clamp max(0, ...) before normalising.":
                reference_alti_row(T, y, clamp=False).numpy(),
            "L2 norms were used; ALTI uses the L1 (Manhattan) norm.": reference_alti_row(T, y, p=2).numpy(),
            "the size ||T_j||_1 was used instead of the proximity of T_j to y.": (l1 / l1.sum()).numpy(),
        }, atol=1e-6, want=want)
        break
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 8. gradient x input
# ------------------------------------------------------------------------------------------

def reference_grad_x_input(model, ids: torch.Tensor, pos: int, t_id: int, f_id: int | None, *,
                           reduce: str = "l2", objective: str = "diff", where: str = "word") -> np.ndarray:
    r"""Gradient × input of :math:`f = z_t - z_f` (logits at ``pos``) at the word-embedding output.

    Computed with plain autograd (a hook keeps the word embeddings' output and its gradient),
    independently of :mod:`cmixlib.gradients`. ``reduce`` ``"l2"`` (the exercise), ``"dot"``
    (``|g·x|``) or ``"grad"`` (``||g||``); ``objective`` ``"diff"``, ``"target"`` (z_t only) or ``"prob"``
    (softmax probability of t); ``where`` ``"word"`` or ``"embeddings"`` (the output of the whole
    embedding block): the variants diagnose the usual mistakes.
    """
    saved: dict = {}

    def hook(_module, _inputs, output):
        output.retain_grad()
        saved["x"] = output

    module = model.get_input_embeddings() if where == "word" else model.base_model.embeddings
    handle = module.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            z = model(input_ids=ids).logits[0, pos]
            f = {"diff": lambda: z[t_id] - z[f_id], "target": lambda: z[t_id],
                 "prob": lambda: torch.softmax(z, -1)[t_id]}[objective]()
            f.backward()
    finally:
        handle.remove()
    x, grad = saved["x"][0].detach(), saved["x"].grad[0]
    model.zero_grad(set_to_none=True)
    if reduce == "l2":
        out = (grad * x).norm(dim=-1)
    elif reduce == "dot":
        out = (grad * x).sum(-1).abs()
    else:
        out = grad.norm(dim=-1)
    return out.detach().double().cpu().numpy()


def check_grad_x_input(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(model, ids, pos, t_id, f_id) -> (n,)``: gradient × input, L2 over dimensions.

    ``model`` is a tiny random masked LM, ``ids`` (1, n) its input, ``pos`` the masked position,
    ``t_id``/``f_id`` the target and foil token ids. Differentiate :math:`z_t - z_f` (the logits at
    ``pos``) with respect to the output of the word-embedding module (``model.get_input_embeddings()``)
    and return :math:`\lVert g_j \odot x_j \rVert_2` for every token j.
    """
    from cmixlib.models.random_models import random_model

    res = CheckResult("check_grad_x_input")
    model = random_model("bert", task="mlm", seed=seed, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed + 7)
    ids = torch.randint(5, model.config.vocab_size, (1, 7), generator=g)
    pos, t_id, f_id = 3, 11, 17
    args = (model, ids, pos, t_id, f_id)
    want = reference_grad_x_input(*args)
    got = _call(res, student_fn, model, ids.clone(), pos, t_id, f_id)
    if got is not None:
        got = got.reshape(-1) if got.size == want.size else got
    if got is not None and _check_shape(res, got, want.shape, "(one score per input token)"):
        if (got < -1e-9).any():
            res.fail("negative scores: an L2 norm is never negative.")
        if _close(got, want, atol=1e-8, rtol=1e-5):
            res.ok("matches the reference")
        else:
            _report_diff(res, got, want, lambda ix: f"token j={ix[0]}", 1e-8)
            _diagnose(res, got, {
                "the gradient of z_t alone was taken; the score is the difference z_t - z_f.":
                    reference_grad_x_input(*args, objective="target"),
                "the softmax probability was differentiated; the score is the logit difference.":
                    reference_grad_x_input(*args, objective="prob"),
                "this is the gradient's norm (grad L2), without multiplying by the input.":
                    reference_grad_x_input(*args, reduce="grad"),
                "the product was summed over dimensions (|g·x|); take its L2 norm instead.":
                    reference_grad_x_input(*args, reduce="dot"),
                "the gradient was taken at the output of the whole embedding block (positions, "
                "token types and LayerNorm included); use the word embeddings' output.":
                    reference_grad_x_input(*args, where="embeddings"),
            }, atol=1e-8, want=want)
    return res.finish(verbose)
