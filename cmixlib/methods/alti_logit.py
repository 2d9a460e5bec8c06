"""ALTI-Logit (Ferrando et al. 2023) on pre-LN decoder LMs, as its authors evaluate it: the
per-token explanation with the embedding term, per-head contributions, and the part of the logit
that no input token receives (MLPs, biases) reported beside it.

Notation of :mod:`cmixlib.forward.decoder`. With the final norm linearised at the real final residual of
row i (its scale s_i a constant, as the paper), u_i = (U_target - U_foil) / s_logits and
u~_i = P(gamma_f * u_i) / s_i (P centres for LayerNorm, identity for RMSNorm), the logit
(difference) at row i splits exactly into

.. math:: \\mathrm{logit}_i = \\underbrace{\\tilde u_i\\cdot x^0_i}_{\\text{embedding}}
          + \\sum_\\ell \\Big(\\underbrace{\\sum_{k\\le i}\\sum_h \\alpha^{\\ell,h}_{ik}\\,
          \\tilde u_i\\cdot f^{\\ell,h}(x_k)}_{\\text{attention, per head and source}}
          + \\underbrace{\\tilde u_i\\cdot r b^\\ell_O + \\tilde u_i\\cdot r g^\\ell_i}_{
          \\text{bias, MLP}}\\Big) + \\underbrace{u_i\\cdot\\beta_f + b_{\\mathrm{lm}}}_{
          \\text{final bias}}.

Layer l's attention term from source k is carried to the input tokens by the ALTI rollout of
layers 0..l-1 (``tracked``). The explanation of the authors (mt-upc/logit-explanations,
Apache-2.0, read not copied: ``evaluation.ipynb`` adds ``init_logit`` at the last position) is
the tracked attention terms summed over layers **plus the embedding term at the explained
token itself** (column i of row i): :attr:`AltiLogit.explanation`. What remains, the MLP outputs
and the biases, is not attributed to any token: :attr:`AltiLogit.remainder`, reported beside
every explanation (:meth:`AltiLogit.summary`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cmixlib.models.arch import (decoder_final_norm, decoder_logits_divisor, decoder_norm_params,
                                 decoder_unembed)
from cmixlib.forward.decoder import DecoderCapture, run_decoder
from cmixlib.forward.decoder_checks import (CHECK_EPS, DecompositionError, check_decoder_model,
                                            model_name)
from cmixlib.forward.decoder_inputs import (TokenIds, decoder_sentences, per_row_ids,
                                            resolve_targets)
from cmixlib.forward.prepare import unpack_model
from cmixlib.methods.decoder_maps import alti_rollout, causal_mask

__all__ = ["AltiLogit", "alti_logit", "explain_logit"]


@dataclass
class AltiLogit:
    """ALTI-Logit of one sentence; every term in logit units, rows i = positions predicting.

    ``target`` / ``foil`` (n,) token ids per row (foil None: the target's logit alone);
    ``logit`` (n,) the model's logit (difference) at each row; ``sources`` (L, n, n): layer l's
    attention block contribution from its input token k, sum_h alpha^h_ik u~_i . f^h(x_k);
    ``tracked`` (L, n, n): ``sources[l] @ R^(l-1)`` mapped to the input tokens through the ALTI
    rollout ``rollout`` (L, n, n) of the layers below (R^(-1) = I); ``head_sources``
    (L, H, n, n) or None: the per-head terms alpha^h_ik u~_i . f^h(x_k) (they sum over h to
    ``sources``); ``attn_bias`` (L, n) u~_i . r b_O; ``mlp`` (L, n) u~_i . r g_i;
    ``embedding`` (n,) u~_i . x^0_i; ``final_bias`` (n,) u_i . beta_f plus the LM head's bias
    (module docstring).
    """

    target: np.ndarray
    foil: np.ndarray | None
    logit: np.ndarray
    sources: np.ndarray
    tracked: np.ndarray
    attn_bias: np.ndarray
    mlp: np.ndarray
    embedding: np.ndarray
    final_bias: np.ndarray
    rollout: np.ndarray | None = None
    head_sources: np.ndarray | None = None

    def explain(self, embedding: bool = True) -> np.ndarray:
        """(n, n): sum_l tracked[l], plus (``embedding``, the authors' default) the embedding
        term u~_i . x^0_i at column i of row i."""
        out = self.tracked.sum(axis=0)
        if embedding:
            out = out + np.diag(self.embedding)
        return out

    @property
    def explanation(self) -> np.ndarray:
        """The authors' ALTI-Logit explanation, (n, n): :meth:`explain` with the embedding."""
        return self.explain(embedding=True)

    @property
    def remainder(self) -> np.ndarray:
        """(n,) the part of the logit attributed to no input token: sum_l (mlp + attn_bias) +
        final_bias; ``explanation.sum(-1) + remainder == logit`` up to rounding."""
        return self.mlp.sum(0) + self.attn_bias.sum(0) + self.final_bias

    def head_tracked(self) -> np.ndarray:
        """(L, H, n, n): each head's terms carried to the input tokens as ``tracked`` is
        (``head_sources[l, h] @ R^(l-1)``); they sum over h to ``tracked``."""
        if self.head_sources is None or self.rollout is None:
            raise ValueError("per-head terms were not computed: call alti_logit(..., "
                             "heads=True) or explain_logit(..., heads=True).")
        out = self.head_sources.copy()
        out[1:] = np.einsum("lhik,lkj->lhij", self.head_sources[1:], self.rollout[:-1])
        return out

    def reconstruction(self) -> np.ndarray:
        """embedding + sum_l (sum_k sources + attn_bias + mlp) + final_bias, (n,): equals
        ``logit`` up to rounding (the decomposition is exact under the linearisation)."""
        return (self.embedding + (self.sources.sum(-1) + self.attn_bias + self.mlp).sum(0)
                + self.final_bias)

    def summary(self, row: int = -1) -> dict[str, float]:
        """Row ``row``'s logit and its parts: ``logit``; ``tokens`` (the explanation's sum:
        attention terms and embedding); ``embedding``; ``mlp``; ``biases`` (attention output
        and final biases); ``remainder`` (mlp + biases, attributed to no token) and
        ``remainder_share`` = ``|remainder| / (|tokens| + |remainder|)``."""
        i = range(len(self.logit))[row]
        tokens = float(self.explanation[i].sum())
        rem = float(self.remainder[i])
        return {"logit": float(self.logit[i]), "tokens": tokens,
                "embedding": float(self.embedding[i]), "mlp": float(self.mlp[:, i].sum()),
                "biases": float(self.attn_bias[:, i].sum() + self.final_bias[i]),
                "remainder": rem,
                "remainder_share": abs(rem) / (abs(tokens) + abs(rem)) if tokens or rem
                else 0.0}


def _per_row_ids(value: Any, n: int, name: str, default: torch.Tensor | None,
                 vocab: int) -> torch.Tensor | None:
    """(n,) ids from None (``default``), an id or one id per row, each in 0..vocab-1."""
    return default if value is None else per_row_ids(value, n, name, None, vocab)


def _check_reconstruction(res: AltiLogit, mag: np.ndarray, k: int, model) -> None:
    """|reconstruction - logit| <= gamma_k (sum of absolute terms), else DecompositionError."""
    g = k * CHECK_EPS / (1 - k * CHECK_EPS)
    err = np.abs(res.reconstruction() - res.logit)
    if not np.all(err <= g * mag):
        i = int(np.argmax(err - g * mag))
        raise DecompositionError(
            f"{model_name(model)}: ALTI-Logit's terms do not add up to the logit at row {i} "
            f"(error {err[i]:.3g}, allowed {g * mag[i]:.3g}): the family declaration does not "
            "describe this model's final norm or LM head; refusing rather than guessing.")


@torch.no_grad()
def alti_logit(capture: DecoderCapture, model: torch.nn.Module, target: TokenIds = None,
               foil: TokenIds = None, rollout: np.ndarray | None = None, *,
               heads: bool = False, check: bool = True) -> AltiLogit:
    """ALTI-Logit (module docstring) at every position i of one captured sentence.

    ``target``: None (the model's top prediction at each row), a token id, or one id per row;
    ``foil``: None, an id or one per row. ``rollout``: the ALTI rollout (L, n, n) if already
    computed. ``heads``: also the per-head terms (L, H, n, n: memory L H n^2 float64).
    ``check``: the reconstruction is asserted against the model's logit (a
    :class:`~cmixlib.forward.decoder_checks.DecompositionError` otherwise). Deliberate differences from the
    authors' code: every row, not only the last; the RMSNorm linearisation (no centring) for
    RMSNorm families; the MLP and bias terms are returned beside the tracked attention terms,
    never tracked to tokens (as the paper).
    """
    n = capture.input_ids.shape[0]
    head = decoder_unembed(model)                  # raises the "no LM head" error
    top = capture.logits.argmax(dim=-1).cpu()
    target = _per_row_ids(target, n, "target", top, head.weight.shape[0])
    foil = _per_row_ids(foil, n, "foil", None, head.weight.shape[0])
    dev = capture.final_norm_in.device
    u = head.weight[target.to(dev)]                                        # (n, d)
    bias = head.bias[target.to(dev)] if head.bias is not None else \
        torch.zeros(n, dtype=u.dtype, device=dev)
    if foil is not None:
        u = u - head.weight[foil.to(dev)]
        if head.bias is not None:
            bias = bias - head.bias[foil.to(dev)]
    divisor = decoder_logits_divisor(model)
    if divisor != 1.0:                                  # Granite: logits / logits_scaling
        u, bias = u / divisor, bias / divisor
    fam = capture.layers[0].parts.family
    gamma, beta, eps = decoder_norm_params(fam, decoder_final_norm(model), head.weight[0])
    fin = capture.final_norm_in
    if fam.norm == "layernorm":
        scale = torch.sqrt(fin.var(dim=-1, unbiased=False, keepdim=True) + eps)
        ut = gamma * u
        ut = (ut - ut.mean(dim=-1, keepdim=True)) / scale
    else:
        scale = torch.sqrt(fin.pow(2).mean(dim=-1, keepdim=True) + eps)
        ut = gamma * u / scale                                             # (n, d)
    final_bias = bias.to(u.dtype) + ((u @ beta) if beta is not None else 0.0)
    sources, per_head, attn_bias, mlp, mag = [], [], [], [], torch.zeros(n, dtype=torch.float64)
    for st in capture.layers:
        g = torch.einsum("hkd,id->hik", st.head_out, ut)                   # u~_i . f^h(x_k)
        hs = st.attn_weights * g                                           # (H, n, n)
        s = hs.sum(dim=0)
        mask = causal_mask(n, s)
        sources.append(s * mask)
        if heads:
            per_head.append((hs * mask).double().cpu())
        b_o = st.b_o                                                        # r b_O
        attn_bias.append(ut @ b_o if b_o is not None else ut.new_zeros(n))
        r = st.parts.residual_multiplier
        mlp.append((ut * st.mlp_out).sum(-1) * r if r != 1.0 else (ut * st.mlp_out).sum(-1))
        if check:
            mag += hs.abs().sum(dim=(0, 2)).double().cpu() + \
                (ut.abs() * (st.mlp_out.abs() * abs(r))).sum(-1).double().cpu()
        st.release()
    src = torch.stack(sources).double().cpu().numpy()
    roll = alti_rollout(capture) if rollout is None else np.asarray(rollout, dtype=np.float64)
    tracked = src.copy()
    tracked[1:] = np.einsum("lik,lkj->lij", src[1:], roll[:-1])
    logits = capture.logits.double().cpu()
    logit = logits[torch.arange(n), target]
    if foil is not None:
        logit = logit - logits[torch.arange(n), foil]
    as_np = lambda t: torch.as_tensor(t).double().cpu().numpy()   # noqa: E731
    res = AltiLogit(target=target.numpy(), foil=None if foil is None else foil.numpy(),
                    logit=logit.numpy(), sources=src, tracked=tracked,
                    attn_bias=as_np(torch.stack(attn_bias)), mlp=as_np(torch.stack(mlp)),
                    embedding=as_np((ut * capture.embeddings).sum(-1)),
                    final_bias=as_np(final_bias).reshape(-1) * np.ones(n), rollout=roll,
                    head_sources=torch.stack(per_head).numpy() if heads else None)
    if check:
        # every term's dot product over d, the sums over layers and sources, and the model's
        # own logit through its norm and LM head (u = float32's: module cmixlib.forward.decoder)
        fout = capture.final_norm_out
        mag += ((ut.abs() * capture.embeddings.abs()).sum(-1)
                + (u.abs() * fout.abs()).sum(-1) + bias.abs()).double().cpu()
        mag += torch.as_tensor(np.abs(res.attn_bias).sum(0) + np.abs(res.logit)
                               + np.abs(res.final_bias))
        d, L = fin.shape[-1], len(capture.layers)
        _check_reconstruction(res, mag.numpy(), 2 * d + L * (n + 3) + 8, model)
    return res


def explain_logit(model: Any, tokenizer: Any, text: Any, target: TokenIds = None,
                  foil: TokenIds = None, *, heads: bool = False
                  ) -> AltiLogit | list[AltiLogit]:
    """ALTI-Logit of each sentence of ``text`` (a string, a list of strings or a mapping with
    ``input_ids``, under the BOS rule of :mod:`cmixlib.forward.decoder_inputs`), as an
    :class:`AltiLogit`: the logit, the explanation with the embedding term, the per-layer and
    (``heads``) per-head terms, the remainder and the target used. ``model``: a decoder LM or a
    :class:`~cmixlib.ModelBundle`; ``target`` / ``foil`` as for :func:`cmixlib.context_mixing`
    (ids or one-token strings; per prompt for a batch). A list for a batch.

    >>> import torch
    >>> from cmixlib.forward.decoder import random_decoder
    >>> res = explain_logit(random_decoder("llama"), None, {"input_ids": torch.arange(6)},
    ...                     target=3, foil=4)
    >>> res.explanation.shape, bool(abs(res.explanation.sum(-1) + res.remainder
    ...                                 - res.logit).max() < 1e-4)
    ((6, 6), True)
    """
    model, tokenizer = unpack_model(model, tokenizer)
    check_decoder_model(model)
    vocab = decoder_unembed(model).weight.shape[0]
    seqs, is_batch = decoder_sentences(model, tokenizer, text)
    lengths = [len(s) for s in seqs]
    tg, fl = (resolve_targets(v, name, tokenizer, lengths, is_batch, vocab)
              for v, name in ((target, "target"), (foil, "foil")))
    out = [alti_logit(run_decoder(model, s), model, t, f, heads=heads)
           for s, t, f in zip(seqs, tg, fl)]
    return out if is_batch else out[0]
