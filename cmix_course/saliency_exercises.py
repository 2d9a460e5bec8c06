r"""Exercises on comparing maps with saliency scores: GlobEnc's Table 1 quantity, the Spearman
correlation of a rolled-out ``[CLS]`` row with a saliency vector (chapter 13), and the blank-out
(erasure) row of a masked-LM prediction (chapter 14).

Each ``reference_*`` is an obvious, loop-based implementation; the tests compare it with the
library (:func:`cmixlib.methods.aggregation.rollout` with :func:`cmixlib.metrics.statistics.spearman_rows`, as
``globenc-correlations`` uses them, and :func:`cmixlib.gradients.blank_out`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .checking import CheckResult, _call, _check_shape, _close, _diagnose, _report_diff

# ------------------------------------------------------------------------------------------
# 13. GlobEnc's correlation of the rolled-out [CLS] row with a saliency vector
# ------------------------------------------------------------------------------------------

def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1])


def reference_cls_spearman(maps: np.ndarray, saliency: np.ndarray, normalize: bool = False, *,
                           order: str = "left", identity: bool = False, row: str = "row",
                           keep: slice = slice(None), rolled: bool = True,
                           correlation: str = "spearman") -> np.ndarray:
    r""":math:`\rho_\ell = \mathrm{Spearman}(\hat C^{\ell}_{0,:},\, s)` for every layer :math:`\ell`.

    :math:`\hat C^{1} = \tilde C^{1}`, :math:`\hat C^{\ell} = \tilde C^{\ell} \hat C^{\ell-1}` (no
    identity), with :math:`\tilde C = C` (``normalize=False``, GlobEnc's code) or
    :math:`\mathrm{rownorm}(C)` (``normalize=True``); row 0 is ``[CLS]``, every position is kept.
    ``maps`` (L, n, n), ``saliency`` (n,); returns (L,). The keyword arguments give the usual
    mistakes (product order, identity added, column instead of row, special positions dropped,
    no rollout, Pearson), used to diagnose the reader's answer.
    """
    m = np.asarray(maps, dtype=float)
    s = np.asarray(saliency, dtype=float)
    if identity:
        m = m + np.eye(m.shape[-1])
    if normalize or identity:
        m = m / m.sum(-1, keepdims=True)
    corr = _spearman if correlation == "spearman" else _pearson
    out, acc = [], None
    for layer in range(len(m)):
        if not rolled:
            acc = m[layer]
        elif acc is None:
            acc = m[0]
        else:
            acc = m[layer] @ acc if order == "left" else acc @ m[layer]
        vec = acc[0] if row == "row" else acc[:, 0]
        out.append(corr(vec[keep], s[keep]))
    return np.array(out)


def random_raw_maps(layers: int, n: int, seed: int) -> np.ndarray:
    """(layers, n, n) positive maps whose rows have very different sums, like the raw norm maps
    GlobEnc multiplies (what the checker feeds the reader's function)."""
    rng = np.random.default_rng(seed)
    m = rng.random((layers, n, n)) ** 2 + 0.02
    m += 2.0 * np.eye(n) * rng.random((layers, n, 1))            # a residual share on the diagonal
    return m * np.exp(1.2 * rng.standard_normal((layers, n, 1)))    # row totals differ


def _tiny_classifier_case(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw N-Enc maps (L, n, n) of a tiny random BERT classifier and its gradient × input (L2)
    saliency of class 1 at the embedding-layer output (``hidden_states[0]``), by plain autograd."""
    from cmixlib.methods import dispatch as core
    from cmixlib.models.random_models import random_model

    model = random_model("bert", task="sequence-classification", layers=3, num_labels=2,
                         seed=seed, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed + 11)
    ids = torch.randint(5, model.config.vocab_size, (1, 8), generator=g)
    maps = core.context_mixing(model, None, {"input_ids": ids}, methods=["globenc_layer"],
                               normalize=False)["globenc_layer"]
    saved: dict = {}

    def hook(_module, _inputs, output):
        output.retain_grad()
        saved["x"] = output

    handle = model.base_model.embeddings.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            model(input_ids=ids).logits[0, 1].backward()
    finally:
        handle.remove()
    x = saved["x"]
    sal = (x.grad[0] * x[0]).norm(dim=-1).detach().numpy()
    return np.asarray(maps, dtype=float), sal


def check_cls_spearman(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(maps, saliency, normalize) -> (L,)``: GlobEnc's Table 1 / Figure 3 quantity
    for one example, the Spearman correlation of the ``[CLS]`` row of the rollout up to each layer
    with the saliency vector.

    ``maps`` (L, n, n) are un-normalised layer maps :math:`C^{\ell}` (row i receives, column j
    contributes), ``saliency`` (n,). Rollout without the identity, current layer on the left:
    :math:`\hat C^{1} = \tilde C^{1}`, :math:`\hat C^{\ell} = \tilde C^{\ell}\hat C^{\ell-1}`, with
    :math:`\tilde C = C` (``normalize=False``) or each row divided by its sum (``normalize=True``).
    :math:`\rho_\ell` = Spearman of row 0 of :math:`\hat C^{\ell}` with ``saliency``, all n
    positions ([CLS] and [SEP] included).
    """
    res = CheckResult("check_cls_spearman")
    rng = np.random.default_rng(seed + 13)
    maps = random_raw_maps(4, 9, seed)
    sal = rng.random(9) ** 2
    cases = [("random raw maps, normalize=False (GlobEnc's code)", maps, sal, False),
             ("the same maps, normalize=True (row-normalised rollout)", maps, sal, True)]
    try:
        real_maps, real_sal = _tiny_classifier_case(seed)
        cases.append(("tiny BERT classifier: raw N-Enc maps and gradient × input, "
                      "normalize=False", real_maps, real_sal, False))
    except Exception:  # noqa: BLE001 - the two random cases are enough
        pass
    for label, m, s, normalize in cases:
        want = reference_cls_spearman(m, s, normalize)
        got = _call(res, student_fn, m.copy(), s.copy(), normalize)
        if got is None:
            break
        if got.size == 1:
            res.fail(f"{label}: you returned one number; return one rho per layer, shape "
                     f"{want.shape} (Figure 3 plots all of them, Table 1 reads the last).")
            if np.isclose(float(got.reshape(-1)[0]), want[-1], atol=1e-6):
                res.info("it equals the last layer's rho: only the other layers are missing.")
            break
        got = got.reshape(-1) if got.size == want.size else got
        if not _check_shape(res, got, want.shape, f"[{label}: one rho per layer]"):
            break
        if np.all(np.abs(got) <= 1 + 1e-9):
            res.ok(f"{label}: every value is in [-1, 1]")
        else:
            res.fail(f"{label}: values outside [-1, 1]; a correlation never leaves it.")
        if _close(got, want, atol=1e-6):
            res.ok(f"{label}: matches the reference")
            continue
        _report_diff(res, got, want, lambda ix: f"{label}, layer {ix[0] + 1}", 1e-6)
        ref = lambda **kw: reference_cls_spearman(m, s, normalize, **kw)  # noqa: E731
        n = m.shape[-1]
        _diagnose(res, got, {
            ("the rows were not normalised although normalize=True: divide each layer's rows "
             "by their sums before multiplying." if normalize else
             "the rows were normalised although normalize=False: GlobEnc's code multiplies the "
             "raw maps, and ranks of the [CLS] row are not invariant to that choice."):
                reference_cls_spearman(m, s, not normalize),
            "the identity was added; GlobEnc's maps contain the residual already, so its rollout "
            "adds none.": ref(identity=True),
            "the product is in the wrong order: the current layer goes on the LEFT "
            "(C^l times the rollout so far).": ref(order="right"),
            "you read column 0 (what [CLS] gives to each token); read row 0 (what each token "
            "gives to [CLS]).": ref(row="column"),
            "[CLS] and [SEP] were left out; GlobEnc's code correlates all positions.":
                ref(keep=slice(1, n - 1)),
            "the layers were not rolled out: this is each single layer's [CLS] row (Table 2's "
            "'individual' rows).": ref(rolled=False),
            "this is Pearson's r of the values; Spearman's rho is Pearson's r of the ranks.":
                ref(correlation="pearson"),
        }, atol=1e-6, want=want, layers=True)
        break
    return res.finish(verbose)


# ------------------------------------------------------------------------------------------
# 14. blank-out (erasure) of a masked-LM prediction
# ------------------------------------------------------------------------------------------

@torch.no_grad()
def reference_blank_out(model, ids: torch.Tensor, pos: int, t_id: int, f_id: int, r_id: int, *,
                        prob: str = "pair", sign: int = 1, skip: tuple[int, ...] = (),
                        delete: bool = False) -> np.ndarray:
    r"""Blank-out :math:`s_j = p(w) - p(w_{j \leftarrow r})` for every position j, with
    :math:`p = \sigma(z_t - z_f)`, the softmax over {target, foil} of the logits at ``pos``.

    One forward pass per position (the library batches them). ``prob="vocab"`` (the softmax
    over the whole vocabulary), ``"logit"`` (:math:`z_t - z_f`), ``sign=-1``, ``skip`` (positions
    set to 0) and ``delete`` (token j removed instead of replaced) give the usual mistakes.
    """
    def p(x: torch.Tensor, at: int) -> float:
        z = model(input_ids=x).logits[0, at]
        if prob == "vocab":
            return float(torch.softmax(z, -1)[t_id])
        if prob == "logit":
            return float(z[t_id] - z[f_id])
        return float(torch.softmax(torch.stack([z[t_id], z[f_id]]), -1)[0])

    base = p(ids, pos)
    n = ids.shape[1]
    out = np.zeros(n)
    for j in range(n):
        if j in skip:
            continue
        if delete:
            x = torch.cat([ids[:, :j], ids[:, j + 1:]], dim=1)
            at = pos - 1 if j < pos else pos
            out[j] = base - p(x, at) if j != pos else 0.0
        else:
            x = ids.clone()
            x[0, j] = r_id
            out[j] = base - p(x, pos)
    return sign * out


def check_blank_out(student_fn: Callable, *, seed: int = 0, verbose: bool = True) -> CheckResult:
    r"""``student_fn(model, ids, pos, t_id, f_id, r_id) -> (n,)``: the blank-out row of a
    masked-LM prediction, as chapter 14's agreement tables show it.

    ``model`` is a tiny random masked LM, ``ids`` (1, n) its input with ``[MASK]`` at ``pos``,
    ``t_id``/``f_id`` the correct and the wrong verb, ``r_id`` the replacement token. With
    :math:`p(w) = \sigma(z_t - z_f)` (the softmax over the two candidates at ``pos``), return
    :math:`s_j = p(w) - p(w_{j \leftarrow r})` for every position j, ``[CLS]``, ``[SEP]`` and
    ``[MASK]`` included (ALTI's variant).
    """
    from cmixlib.models.random_models import random_model

    res = CheckResult("check_blank_out")
    # initializer_range 0.2 (not BERT's 0.02): attention is not uniform and one token's
    # replacement moves p(w) visibly, so the report's numbers are readable
    model = random_model("bert", task="mlm", seed=seed, dtype=torch.float64,
                         initializer_range=0.2)
    cfg = model.config
    g = torch.Generator().manual_seed(seed + 17)
    n, pos, t_id, f_id, r_id = 8, 4, 11, 17, 3
    ids = torch.randint(5, cfg.vocab_size, (1, n), generator=g)
    ids[0, 0], ids[0, -1], ids[0, pos] = 1, 2, 4             # [CLS], [SEP], [MASK] of the test ids
    args = (model, ids, pos, t_id, f_id, r_id)
    want = reference_blank_out(*args)
    got = _call(res, student_fn, model, ids.clone(), pos, t_id, f_id, r_id)
    if got is not None:
        got = got.reshape(-1) if got.size == want.size else got
    if got is not None and _check_shape(res, got, want.shape, "(one score per position)"):
        if _close(got, want, atol=1e-8, rtol=1e-5):
            res.ok("matches the reference: s_j = p(w) - p(w with token j replaced by r)")
        else:
            _report_diff(res, got, want, lambda ix: f"position j={ix[0]}", 1e-8)
            with torch.no_grad():
                z = model(input_ids=ids).logits[0, pos]
            base = float(torch.sigmoid(z[t_id] - z[f_id]))
            _diagnose(res, got, {
                "these are the perturbed probabilities p(w_{j<-r}) themselves; subtract each "
                "from the unperturbed p(w).": base - want,
                "the sign is reversed: s_j = p(w) - p(w_{j<-r}), positive when token j helped.":
                    reference_blank_out(*args, sign=-1),
                "p is the softmax over the whole vocabulary; use the two candidates only, "
                "sigma(z_t - z_f).": reference_blank_out(*args, prob="vocab"),
                "these are changes of the logit difference z_t - z_f; take the probability "
                "sigma(z_t - z_f) first.": reference_blank_out(*args, prob="logit"),
                "[CLS], [SEP] and the [MASK] position were set to 0; this variant (ALTI's code) "
                "scores every position.": reference_blank_out(*args, skip=(0, n - 1, pos)),
                "token j was deleted (a shorter input); replace it by r_id instead.":
                    reference_blank_out(*args, delete=True),
            }, atol=1e-8, want=want)
    return res.finish(verbose)
