"""Checkers for the book's exercises.

Each ``check_*`` function takes the reader's function, runs it on a tiny random model (built by
:func:`cmixlib.random_model`, nothing is downloaded) or on random maps, compares the result
with a reference implementation and prints what is right and what is wrong: shape, row sums,
the entries that differ and, where a typical mistake can be recognised, its likely cause.

It returns a :class:`CheckResult` (truthy when everything passed). In a notebook the report is
printed once; ``result.messages`` holds the lines.

Exercises and their checkers
----------------------------
``check_attention_probs(fn)``
    ``fn(layer, hidden) -> (H, n, n)``: the attention weights of one BERT layer from its weights.
``check_ln_decomposition(fn)``
    ``fn(parts, ln) -> (m, d)``: split ``LN(sum(parts))`` into one term per part (plus ``ln.bias``).
``check_rollout(fn)``
    ``fn(maps, add_identity) -> (L, n, n)``: rollout of per-layer maps.
``check_value_zeroing_row(fn)``
    ``fn(layer, hidden, i) -> (n,)``: row ``i`` of one layer's Value Zeroing map.
``check_nenc(fn)``
    ``fn(T, q, ln2) -> (n, n)``: GlobEnc's un-normalised N-Enc map from the LN1 vectors.
``check_alti_row(fn)``
    ``fn(T, y) -> (n,)``: one row of ALTI's normalised contributions.
``check_grad_x_input(fn)``
    ``fn(model, ids, pos, t_id, f_id) -> (n,)``: gradient × input (L2) at the word embeddings.
"""
from __future__ import annotations

import math
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

OK, BAD, INFO = "✓", "✗", "·"


@dataclass
class CheckResult:
    """Outcome of a checker: ``passed`` plus the report lines (truthy when passed)."""

    name: str
    passed: bool = True
    messages: list[str] = field(default_factory=list)

    def ok(self, text: str) -> None:
        self.messages.append(f"{OK} {text}")

    def fail(self, text: str) -> None:
        self.passed = False
        self.messages.append(f"{BAD} {text}")

    def info(self, text: str) -> None:
        self.messages.append(f"  {INFO} {text}")

    def __bool__(self) -> bool:
        return self.passed

    def report(self) -> str:
        head = f"{self.name}: {'all checks passed' if self.passed else 'NOT correct yet'}"
        return "\n".join([head, *self.messages])

    def __repr__(self) -> str:
        return f"CheckResult({self.name!r}, passed={self.passed})"

    def _ipython_display_(self) -> None:  # the report was printed already: show nothing more
        return None


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------

def _tiny_bert(seed: int = 0, hidden: int = 32, layers: int = 2, heads: int = 4,
               dtype: torch.dtype = torch.float32):
    from .models import random_model

    return random_model("bert", hidden=hidden, layers=layers, heads=heads, seed=seed, dtype=dtype)


def _tiny_inputs(model, n: int = 7, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, model.config.vocab_size, (1, n), generator=g)
    with torch.no_grad():
        out = model(ids, output_hidden_states=True, output_attentions=True)
    return ids, out


def _to_numpy(x) -> np.ndarray | None:
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().numpy()
    try:
        return np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        return None


def _call(res: CheckResult, fn: Callable, *args):
    """Call the reader's function; report an exception or a None result as a failure."""
    try:
        out = fn(*args)
    except NotImplementedError:
        res.fail("your function raised NotImplementedError: fill in the exercise first.")
        return None
    except Exception as exc:  # noqa: BLE001 - we show the reader what went wrong
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        res.fail(f"your function raised an exception: {tb}")
        return None
    if out is None:
        res.fail("your function returned None (not implemented yet, or a missing `return`).")
        return None
    arr = _to_numpy(out)
    if arr is None:
        res.fail(f"could not turn the result (a {type(out).__name__}) into an array of numbers.")
    return arr


def _check_shape(res: CheckResult, got: np.ndarray, want_shape: tuple, what: str) -> bool:
    got_shape = tuple(got.shape)
    squeezed = tuple(s for s in got_shape if s != 1)
    if got_shape == tuple(want_shape):
        res.ok(f"shape {got_shape} {what}")
        return True
    if squeezed == tuple(s for s in want_shape if s != 1) and got.size == math.prod(want_shape):
        res.fail(f"shape is {got_shape}, expected {tuple(want_shape)} {what} (same entries: "
                 f"drop or add the batch dimension).")
    else:
        res.fail(f"shape is {got_shape}, expected {tuple(want_shape)} {what}.")
    return False


def _close(a: np.ndarray, b: np.ndarray, atol: float, rtol: float = 1e-4) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, atol=atol, rtol=rtol))


def _report_diff(res: CheckResult, got: np.ndarray, want: np.ndarray, names: Callable[[tuple], str],
                 atol: float, max_items: int = 5) -> None:
    diff = np.abs(got - want)
    bad = np.argwhere(~np.isclose(got, want, atol=atol, rtol=1e-4))
    res.fail(f"{len(bad)} of {got.size} entries differ from the reference "
             f"(largest difference {diff.max():.3g}).")
    for idx in bad[:max_items]:
        idx = tuple(int(k) for k in idx)
        res.info(f"{names(idx)}: yours {got[idx]:.5f}, expected {want[idx]:.5f}")
    if len(bad) > max_items:
        res.info(f"... and {len(bad) - max_items} more")


def _diagnose(res: CheckResult, got: np.ndarray, candidates: dict[str, np.ndarray], atol: float) -> None:
    for cause, wrong in candidates.items():
        if wrong is not None and _close(got, wrong, atol):
            res.info(f"likely cause: {cause}")
            return


def _check_normalised_row(res: CheckResult, got: np.ndarray | None, want: np.ndarray, label: str, what: str,
                          atol: float) -> bool | None:
    """Shape, row sum 1, non-negativity and closeness of one normalised row; reports each.

    Returns None when there is no result (``got`` None, see :func:`_call`) or its shape is wrong
    (stop checking), else whether the row matches ``want`` (a mismatch is reported entry by
    entry; the caller adds a diagnosis).
    """
    if got is None:
        return None
    got = got.reshape(-1) if got.size == want.size else got
    if not _check_shape(res, got, want.shape, f"[{label}{what}]"):
        return None
    if np.isclose(got.sum(), 1.0, atol=atol):
        res.ok(f"{label}: the row sums to 1")
    else:
        res.fail(f"{label}: the row sums to {got.sum():.4f}, not 1 (normalise it).")
    if (got < -1e-6).any():
        res.fail(f"{label}: negative scores; this method's scores are never negative.")
    if _close(got, want, atol=atol):
        res.ok(f"{label}: matches the reference")
        return True
    _report_diff(res, got, want, lambda ix: f"{label}, token j={ix[0]}", atol)
    return False


# ------------------------------------------------------------------------------------------
# 1. attention weights from the layer's weights
# ------------------------------------------------------------------------------------------

def reference_attention_probs(layer, hidden: torch.Tensor, *, scale: bool = True,
                              softmax_dim: int = -1) -> torch.Tensor:
    """Attention weights (H, n, n) of a BERT layer for one unpadded sentence ``hidden`` (1, n, d)."""
    sa = layer.attention.self
    x = hidden[0]
    n, d = x.shape
    heads = sa.num_attention_heads if hasattr(sa, "num_attention_heads") else layer.attention.self.config.num_attention_heads
    dh = d // heads
    q = sa.query(x).view(n, heads, dh).transpose(0, 1)
    k = sa.key(x).view(n, heads, dh).transpose(0, 1)
    scores = q @ k.transpose(-1, -2)
    if scale:
        scores = scores / math.sqrt(dh)
    return torch.softmax(scores, dim=softmax_dim)


@torch.no_grad()
def check_attention_probs(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(layer, hidden) -> (H, n, n)`` attention weights of a tiny BERT layer.

    ``layer`` is a ``BertLayer``, ``hidden`` its input of shape (1, n, d) (one sentence, no
    padding). Compared with the weights the model itself returns (``output_attentions=True``).
    """
    res = CheckResult("check_attention_probs")
    model = _tiny_bert(seed)
    _, out = _tiny_inputs(model, seed=seed)
    for layer_idx in range(model.config.num_hidden_layers):
        layer = model.encoder.layer[layer_idx]
        hidden = out.hidden_states[layer_idx]
        want = out.attentions[layer_idx][0].double().numpy()
        got = _call(res, student_fn, layer, hidden.clone())
        if got is None:
            break
        if got.ndim == 4 and got.shape[0] == 1:
            got = got[0]
        if not _check_shape(res, got, want.shape, "(heads, n, n)"):
            break
        rows = got.sum(-1)
        if not np.allclose(rows, 1.0, atol=1e-4):
            cols = got.sum(-2)
            hint = (" (columns sum to 1: the softmax ran over the query axis instead of the key axis)"
                    if np.allclose(cols, 1.0, atol=1e-4) else "")
            res.fail(f"layer {layer_idx + 1}: rows should sum to 1 but sum to "
                     f"{rows.min():.3f}..{rows.max():.3f}{hint}.")
        if _close(got, want, atol=1e-5):
            res.ok(f"layer {layer_idx + 1}: matches the model's attention weights")
            continue
        _report_diff(res, got, want, lambda ix: f"head {ix[0]}, query {ix[1]}, key {ix[2]}", 1e-5)
        _diagnose(res, got, {
            "the scores were not divided by sqrt(d_head).":
                reference_attention_probs(layer, hidden, scale=False).double().numpy(),
            "softmax over the wrong axis (it must normalise over keys, the last axis).":
                reference_attention_probs(layer, hidden, softmax_dim=-2).double().numpy(),
            "the matrix is transposed (rows must be queries, columns keys).":
                np.swapaxes(want, -1, -2),
        }, atol=1e-5)
        break
    if verbose:
        print(res.report())
    return res


# ------------------------------------------------------------------------------------------
# 2. the LayerNorm decomposition (Kobayashi et al. 2021)
# ------------------------------------------------------------------------------------------

def reference_ln_decomposition(parts: torch.Tensor, ln: torch.nn.LayerNorm) -> torch.Tensor:
    """Split ``LN(sum_k parts[k])`` into terms g(parts[k]) with sum_k g(parts[k]) + beta = LN(sum).

    g(u) = gamma * (u - mean(u)) / sqrt(var(sum_k parts[k]) + eps): each part is centred on
    its own, and all parts share the standard deviation of the sum (the only non-linear bit).
    """
    total = parts.sum(0)
    std = torch.sqrt(total.var(-1, unbiased=False, keepdim=True) + ln.eps)
    centred = parts - parts.mean(-1, keepdim=True)
    return ln.weight * centred / std


@torch.no_grad()
def check_ln_decomposition(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(parts, ln) -> (m, d)``: terms whose sum plus ``ln.bias`` equals ``ln(parts.sum(0))``.

    ``parts`` is an (m, d) tensor of vectors whose sum enters the LayerNorm ``ln``; the terms must
    be the exact linear decomposition (each part centred, scaled by gamma and divided by the
    standard deviation of the *sum*), with the bias beta left out of the terms.
    """
    res = CheckResult("check_ln_decomposition")
    model = _tiny_bert(seed)
    ln = model.encoder.layer[0].attention.output.LayerNorm
    g = torch.Generator().manual_seed(seed + 1)
    d = ln.normalized_shape[0]
    for trial, m in enumerate((5, 2)):
        parts = torch.randn(m, d, generator=g) * torch.linspace(0.5, 3.0, m)[:, None] + 0.3
        want_t = reference_ln_decomposition(parts, ln)
        want = want_t.double().numpy()
        got = _call(res, student_fn, parts.clone(), ln)
        if got is None:
            break
        if not _check_shape(res, got, want.shape, "(one term per part)"):
            break
        total_ok = np.allclose(got.sum(0) + ln.bias.double().numpy(), ln(parts.sum(0)).double().numpy(), atol=1e-4)
        if total_ok:
            res.ok(f"trial {trial + 1}: the terms plus beta add up to LN(sum of parts)")
        else:
            res.fail(f"trial {trial + 1}: the terms plus beta do not add up to LN(sum of parts).")
        if _close(got, want, atol=1e-5):
            res.ok(f"trial {trial + 1}: every term matches the reference decomposition")
            continue
        if total_ok:
            res.fail("the sum is right but the individual terms are not: the split is not the linear one.")
        else:
            _report_diff(res, got, want, lambda ix: f"part {ix[0]}, dim {ix[1]}", 1e-5)
        std_sum = torch.sqrt(parts.sum(0).var(unbiased=False) + ln.eps)
        own_std = torch.sqrt(parts.var(-1, unbiased=False, keepdim=True) + ln.eps)
        centred = parts - parts.mean(-1, keepdim=True)
        _diagnose(res, got, {
            "beta was added to every term (leave it out; it is added once at the end).":
                (want_t + ln.bias).double().numpy(),
            "each part was divided by its own standard deviation; use the std of the sum.":
                (ln.weight * centred / own_std).double().numpy(),
            "the parts were not centred (subtract each part's own mean).":
                (ln.weight * parts / std_sum).double().numpy(),
            "gamma (ln.weight) is missing.": (centred / std_sum).double().numpy(),
            "each part was passed through the full LayerNorm (LN is not linear).":
                ln(parts).double().numpy(),
        }, atol=1e-5)
        break
    if verbose:
        print(res.report())
    return res


# ------------------------------------------------------------------------------------------
# 3. rollout
# ------------------------------------------------------------------------------------------

def reference_rollout(maps: np.ndarray, add_identity: bool = False) -> np.ndarray:
    """Rollout with the book's convention (:func:`cmixlib.attention.rollout`)."""
    from .attention import rollout

    return np.asarray(rollout(maps, add_identity=add_identity), dtype=float)


def _random_maps(layers: int, n: int, seed: int) -> np.ndarray:
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
    cases = [("random maps, add_identity=False", _random_maps(4, 6, seed), False),
             ("random maps, add_identity=True", _random_maps(3, 5, seed + 1), True)]
    try:
        model = _tiny_bert(seed, layers=3)
        _, out = _tiny_inputs(model, seed=seed)
        att = torch.stack(out.attentions)[:, 0].mean(1).double().numpy()
        cases.append(("tiny BERT attention (mean over heads), add_identity=True", att, True))
    except Exception:  # noqa: BLE001 - the two random cases are enough
        pass
    for label, maps, add_identity in cases:
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
            res.ok(f"{label}: matches the reference")
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
        _diagnose(res, got, candidates, atol=1e-6)
        break
    if verbose:
        print(res.report())
    return res


# ------------------------------------------------------------------------------------------
# 4. one row of Value Zeroing
# ------------------------------------------------------------------------------------------

def _cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    an = a / a.norm(dim=-1, keepdim=True)
    bn = b / b.norm(dim=-1, keepdim=True)
    return 0.5 * (an - bn).norm(dim=-1) ** 2  # = 1 - cos, without cancellation


@torch.no_grad()
def reference_value_zeroing_row(layer, hidden: torch.Tensor, i: int, *, normalize: bool = True,
                                zero: str = "value", similarity: bool = False) -> torch.Tensor:
    """Row ``i`` of Value Zeroing for one BERT layer, by the definition (one forward per token).

    For each token j: zero the value vector of j in every head (bias included: the output of
    ``attention.self.value`` at position j), re-run the layer on the same input, and take the
    cosine distance between token i's new and original outputs. The row is normalised to sum
    to 1 (the diagonal is kept). ``zero="input"`` / ``similarity=True`` / ``normalize=False``
    produce the usual mistakes, used to diagnose the reader's answer.
    """
    original = layer(hidden)[0, i]
    n = hidden.shape[1]
    row = torch.empty(n, dtype=hidden.dtype)
    for j in range(n):
        if zero == "value":
            def hook(_module, _inp, out, j=j):
                out = out.clone()
                out[:, j] = 0.0
                return out

            handle = layer.attention.self.value.register_forward_hook(hook)
            try:
                changed = layer(hidden)[0, i]
            finally:
                handle.remove()
        elif zero == "input":
            h = hidden.clone()
            h[:, j] = 0.0
            changed = layer(h)[0, i]
        else:
            raise ValueError(zero)
        dist = _cosine_distance(changed, original)
        row[j] = 1.0 - dist if similarity else dist
    if normalize:
        row = row / row.sum()
    return row


@torch.no_grad()
def check_value_zeroing_row(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    """``student_fn(layer, hidden, i) -> (n,)``: row ``i`` of Value Zeroing at one BERT layer.

    ``layer`` is a ``BertLayer`` of a tiny random model (call it as ``layer(hidden)``; it
    returns the (1, n, d) output), ``hidden`` its input (1, n, d). Zero the value vectors of one
    token j at a time (all heads, bias included), re-run the layer, and score j by the cosine
    distance between token i's changed and original outputs; normalise the row to sum to 1.
    """
    res = CheckResult("check_value_zeroing_row")
    # float64: the distances are small, and 1 - cos in float32 would blur them
    model = _tiny_bert(seed, dtype=torch.float64)
    _, out = _tiny_inputs(model, n=6, seed=seed)
    cases = [(0, 0), (1, 3), (1, 5)]
    for layer_idx, i in cases:
        layer = model.encoder.layer[layer_idx]
        hidden = out.hidden_states[layer_idx]
        want_t = reference_value_zeroing_row(layer, hidden, i)
        want = want_t.double().numpy()
        got = _call(res, student_fn, layer, hidden.clone(), i)
        matched = _check_normalised_row(res, got, want, f"layer {layer_idx + 1}, row {i}", "", 1e-4)
        if matched is None:
            break
        if matched:
            continue
        _diagnose(res, got, {
            "the row is not normalised to sum to 1.":
                reference_value_zeroing_row(layer, hidden, i, normalize=False).double().numpy(),
            "cosine similarity was used instead of cosine distance (1 - cos).":
                reference_value_zeroing_row(layer, hidden, i, similarity=True).double().numpy(),
            "the input vector x_j was zeroed instead of its value vector; that also changes every "
            "query and key, so the attention weights shift.":
                reference_value_zeroing_row(layer, hidden, i, zero="input").double().numpy(),
        }, atol=1e-4)
        break
    if verbose:
        print(res.report())
    return res


# ------------------------------------------------------------------------------------------
# 5. GlobEnc's N-Enc
# ------------------------------------------------------------------------------------------

def reference_nenc(T: torch.Tensor, q: torch.Tensor, ln2: torch.nn.LayerNorm) -> torch.Tensor:
    r""":math:`\lVert \gamma_2 \odot (T_i(x_j) - \mathrm{mean}(T_i(x_j))) / s(q_i) \rVert_2`, shape (n, n).

    ``T`` (n, n, d): the LN1 output split over source tokens (:math:`\sum_j T_i(x_j)` plus the
    attention-output and LN biases is :math:`y_i`); ``q`` (n, d): the real LN2 input
    :math:`y_i + \mathrm{FFN}(y_i)`, whose standard deviation :math:`s(q_i)` scales every vector
    of row i; :math:`\beta_2` is left out, as in :func:`cmixlib.norms.globenc_layer`.
    """
    s = torch.sqrt(q.var(-1, unbiased=False, keepdim=True) + ln2.eps)          # (n, 1)
    centred = T - T.mean(-1, keepdim=True)
    return torch.linalg.vector_norm(ln2.weight * centred / s[:, None, :], dim=-1)


@torch.no_grad()
def check_nenc(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(T, q, ln2) -> (n, n)``: GlobEnc's un-normalised N-Enc map of one layer.

    ``T`` (n, n, d) holds the LN1 vectors :math:`T_i(x_j)`, ``q`` (n, d) the real input of LN2 and
    ``ln2`` the layer's second LayerNorm. Each vector goes through LN2's linear part (centred,
    times gamma, divided by the standard deviation of the *real* LN2 input of its row, no beta);
    the entry (i, j) is the L2 norm of the result. Do not normalise the rows.
    """
    res = CheckResult("check_nenc")
    model = _tiny_bert(seed)
    ln2 = model.encoder.layer[0].output.LayerNorm
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
                "q_i = y_i + FFN(y_i): the FFN's output is part of what LN2 normalises.":
                    norm(ln2.weight * centred / s_y),
                "beta_2 (ln2.bias) was added to every vector; leave it out.":
                    norm(ln2.weight * centred / s_q + ln2.bias),
                "the vectors were not centred (subtract each vector's own mean over d).":
                    norm(ln2.weight * T / s_q),
                "gamma_2 (ln2.weight) is missing.": norm(centred / s_q),
                "each vector was divided by its own std; all vectors of row i share s(q_i).":
                    norm(ln2.weight * centred / own),
            }, atol=1e-5)
    if verbose:
        print(res.report())
    return res


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
        }, atol=1e-6)
        break
    if verbose:
        print(res.report())
    return res


# ------------------------------------------------------------------------------------------
# 8. gradient x input
# ------------------------------------------------------------------------------------------

def reference_grad_x_input(model, ids: torch.Tensor, pos: int, t_id: int, f_id: int | None, *,
                           reduce: str = "l2", objective: str = "diff", where: str = "word") -> np.ndarray:
    r"""Gradient × input of :math:`f = z_t - z_f` (logits at ``pos``) at the word-embedding output.

    Computed with plain autograd (a hook keeps the word embeddings' output and its gradient),
    independently of :mod:`cmixlib.gradients`. ``reduce`` ``"l2"`` (the exercise), ``"dot"``
    (|g·x|) or ``"grad"`` (||g||); ``objective`` ``"diff"``, ``"target"`` (z_t only) or ``"prob"``
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
    from .models import random_model

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
            }, atol=1e-8)
    if verbose:
        print(res.report())
    return res


__all__ = [
    "CheckResult", "check_alti_row", "check_attention_probs", "check_grad_x_input", "check_ln_decomposition",
    "check_nenc", "check_rollout", "check_value_zeroing_row", "reference_alti_row", "reference_attention_probs",
    "reference_grad_x_input", "reference_ln_decomposition", "reference_nenc", "reference_rollout",
    "reference_value_zeroing_row",
]
