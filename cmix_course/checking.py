"""What every checker shares: :class:`CheckResult` (the report), the tiny random BERT and its
inputs, calling the reader's function safely, comparing shapes, values and normalised rows, and
naming a likely cause (:func:`_diagnose`, :func:`generic_cause`).

A result has one of three statuses: ``passed``, ``failed`` or ``not attempted`` (the reader's
function still raises ``NotImplementedError`` or returns ``None``, as the starter code does). A
checker never raises on a wrong or missing answer, so a notebook with empty answers runs to the
end. In a Jupyter kernel the report is displayed with a machine-readable twin (MIME type
``CHECK_MIME``: checker name and status), which the book's own tests read back from an
executed chapter; the grader never reads it (a notebook can print anything), it runs the
checkers itself (:mod:`cmix_course.grading`). Elsewhere the report is printed.
"""
from __future__ import annotations

import math
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

OK, BAD, INFO = "✓", "✗", "·"
#: MIME type of the machine-readable twin of a checker's report (read by the book's tests only).
CHECK_MIME = "application/vnd.cmixlib.check+json"
PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"


@dataclass
class CheckResult:
    """Outcome of a checker: ``passed`` plus the report lines (truthy when passed)."""

    name: str
    passed: bool = True
    messages: list[str] = field(default_factory=list)
    attempted: bool = True
    #: The checker's test cases by label: True once the case matched the reference (the
    #: grader's rubric gives points per case, :mod:`cmix_course.rubric`).
    cases: dict[str, bool] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """``"passed"``, ``"failed"`` or ``"not attempted"``."""
        if not self.attempted:
            return NOT_ATTEMPTED
        return PASSED if self.passed else FAILED

    def not_attempted(self, text: str) -> None:
        """Record that the reader has not answered yet (the starter code is unchanged)."""
        self.passed = False
        self.attempted = False
        self.messages.append(f"{INFO} {text}")

    def ok(self, text: str) -> None:
        self.messages.append(f"{OK} {text}")

    def begin(self, label: str) -> None:
        """A test case starts: it counts as failed until :meth:`matched` is called."""
        self.cases.setdefault(label, False)

    def matched(self, label: str, detail: str = "") -> None:
        """The case ``label`` matches the reference (reported, and recorded in ``cases``)."""
        self.cases[label] = True
        self.ok(f"{label}: matches the reference{detail}")

    def fail(self, text: str) -> None:
        self.passed = False
        self.messages.append(f"{BAD} {text}")

    def info(self, text: str) -> None:
        self.messages.append(f"  {INFO} {text}")

    def __bool__(self) -> bool:
        return self.passed

    def report(self) -> str:
        head = {PASSED: "all checks passed", FAILED: "NOT correct yet",
                NOT_ATTEMPTED: "not attempted yet"}[self.status]
        return "\n".join([f"{self.name}: {head}", *self.messages])

    def __repr__(self) -> str:
        return f"CheckResult({self.name!r}, status={self.status!r})"

    def finish(self, verbose: bool = True) -> "CheckResult":
        """Show the report (unless ``verbose`` is false) and return ``self``: every checker ends here.

        In a Jupyter kernel the report goes out as one display with two representations, the
        text and a ``CHECK_MIME`` JSON record ``{"checker", "status", "messages"}``;
        outside a kernel it is printed.
        """
        if not verbose:
            return self
        try:
            from IPython import get_ipython
            from IPython.display import display
            kernel = get_ipython() is not None and hasattr(get_ipython(), "kernel")
        except ImportError:  # pragma: no cover - IPython ships with every Jupyter install
            kernel = False
        if kernel:
            display({"text/plain": self.report(),
                     CHECK_MIME: {"checker": self.name, "status": self.status,
                                  "messages": self.messages}}, raw=True)
        else:
            print(self.report())
        return self

    def _ipython_display_(self) -> None:  # the report was printed already: show nothing more
        return None


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------

def _tiny_bert(seed: int = 0, hidden: int = 32, layers: int = 2, heads: int = 4,
               dtype: torch.dtype = torch.float32):
    from cmixlib.models.random_models import random_model

    return random_model("bert", hidden=hidden, layers=layers, heads=heads, seed=seed, dtype=dtype)


def _heads(layer: torch.nn.Module) -> int:
    """Attention heads of a layer module (its self-attention records the count)."""
    return next(int(m.num_attention_heads) for m in layer.modules()
                if hasattr(m, "num_attention_heads"))


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
        res.not_attempted("not attempted: your function raises NotImplementedError. Write it, "
                          "then run this cell again.")
        return None
    except Exception as exc:  # noqa: BLE001 - we show the reader what went wrong
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        res.fail(f"your function raised an exception: {tb}")
        return None
    if out is None:
        res.not_attempted("not attempted: your function returned None (the starter code, or a "
                          "missing `return`). Write it, then run this cell again.")
        return None
    arr = _to_numpy(out)
    if arr is None:
        res.fail(f"could not turn the result (a {type(out).__name__}) into an array of numbers.")
    return arr


def _one_number(res: CheckResult, got: np.ndarray, label: str, what: str) -> float | None:
    """The single number of a scalar answer, or None after reporting that there were several."""
    if got.size != 1:
        res.fail(f"{label}: you returned {got.size} numbers (shape {got.shape}); return one "
                 f"number, {what}.")
        return None
    return float(got.ravel()[0])


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


def _diagnose(res: CheckResult, got: np.ndarray, candidates: dict[str, np.ndarray], atol: float,
              *, want: np.ndarray | None = None, layers: bool = False) -> bool:
    """Name the first usual mistake whose result equals ``got`` ("likely cause: ...").

    ``candidates`` maps a cause to the value that mistake gives. With ``want`` (the right
    answer), the mistakes every map can have are tried next (:func:`generic_cause`: a transposed
    map, rows not normalised, negatives not clipped, and with ``layers`` layer l answered with
    layer l - 1 or l + 1). Returns whether a cause was named.
    """
    for cause, wrong in candidates.items():
        if wrong is not None and _close(got, np.asarray(wrong, dtype=float), atol):
            res.info(f"likely cause: {cause}")
            return True
    if want is not None:
        cause = generic_cause(got, want, atol, layers=layers)
        if cause:
            res.info(f"likely cause: {cause}")
            return True
    return False


def generic_cause(got: np.ndarray, want: np.ndarray, atol: float, *, layers: bool = False) -> str | None:
    """The mistake that turns ``want`` into ``got`` among those any map can have, or None.

    Tried in order: a transposed map (the last two axes swapped), an off-by-one layer (with
    ``layers``: axis 0 counts layers and ``got[l]`` is the right answer of layer l - 1 or
    l + 1), rows not normalised (``got`` is ``want`` times a positive factor per row), rows
    normalised that should not be, and negative scores not clipped to 0 before normalising.
    """
    got = np.asarray(got, dtype=float)
    want = np.asarray(want, dtype=float)
    if got.shape != want.shape or not np.isfinite(got).all() or not np.isfinite(want).all():
        return None
    if got.ndim >= 2 and got.shape[-1] == got.shape[-2] and got.shape[-1] > 1:
        if _close(got, np.swapaxes(want, -1, -2), atol) and not _close(want, np.swapaxes(want, -1, -2), atol):
            return ("the map is transposed: row i must hold what token i RECEIVES (the query), "
                    "column j what token j gives (the key); swap the indices.")
    if layers and got.ndim >= 1 and got.shape[0] >= 2:
        if _close(got[1:], want[:-1], atol):
            return ("off by one layer: your layer l is the reference's layer l - 1 (did you start "
                    "from the identity or an extra layer, or index hidden_states from 1?).")
        if _close(got[:-1], want[1:], atol):
            return ("off by one layer: your layer l is the reference's layer l + 1 (the first "
                    "layer is missing, or the loop starts one layer late).")
    if got.ndim >= 1 and got.shape[-1] > 1:
        w_sum = want.sum(-1, keepdims=True)
        g_sum = got.sum(-1, keepdims=True)
        if np.allclose(w_sum, 1.0, atol=1e-6) and (np.abs(g_sum) > 1e-12).all():
            if not np.allclose(g_sum, 1.0, atol=max(atol, 1e-6)) and _close(got / g_sum, want, atol):
                return "the rows are not normalised: divide each row by its sum."
            clipped = np.clip(got, 0.0, None)
            c_sum = clipped.sum(-1, keepdims=True)
            if (got < -1e-12).any() and (c_sum > 0).all() and _close(clipped / c_sum, want, atol):
                return ("negative scores were kept: clip them to 0 before normalising (the "
                        "method's scores are never negative).")
        elif (np.abs(w_sum) > 1e-12).all() and _close(got, want / w_sum, atol):
            return "the rows were normalised; this exercise asks for the raw values."
    return None


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


def as_values(out, keys: Sequence[str]):
    """A dict with ``keys`` or a sequence of ``len(keys)`` numbers -> a list in ``keys`` order.

    Anything else is returned unchanged (``_call`` then reports what it could not read).
    """
    if isinstance(out, Mapping):
        missing = [k for k in keys if k not in out]
        if missing:
            raise KeyError(f"your dict has no key(s) {missing}; return a dict with the keys "
                           f"{list(keys)} or a tuple of {len(keys)} numbers in that order")
        return [float(out[k]) for k in keys]
    return out
