r"""Hidden Token Attribution (HTA) maps of single encoder layers, the baseline of GlobEnc's Figure 4.

**What is computed.** For layer :math:`\ell` with input tokens :math:`x_j = e^{\ell-1}_j` (the
layer's input, ``hidden_states[ℓ-1]`` of a Hugging Face forward, counting layers from 1) and
output tokens :math:`o_i = e^{\ell}_i`, GlobEnc's "HTA × input" (Modarressi et al. 2022, Eq. 18,
adapting the Hidden Token Attribution of Brunner et al. 2020) is

.. math::  c^{\ell}_{i \leftarrow j} = \Big\lVert \frac{\partial e^{\ell}_i}{\partial e^{\ell-1}_j}
           \odot e^{\ell-1}_j \Big\rVert_F
           = \Big( \sum_{a=1}^{d} \sum_{b=1}^{d}
             \Big( \frac{\partial e^{\ell}_{i,a}}{\partial e^{\ell-1}_{j,b}}\, e^{\ell-1}_{j,b} \Big)^2 \Big)^{1/2},

i.e. the :math:`d \times d` Jacobian block of output token :math:`i` w.r.t. input token
:math:`j`, each column :math:`b` scaled by the input value :math:`e^{\ell-1}_{j,b}`
(gradient × input for every output dimension :math:`a`), then the Frobenius norm.
``times_input=False`` gives the plain sensitivity :math:`\lVert \partial e^{\ell}_i / \partial
e^{\ell-1}_j \rVert_F` (the original HTA's gradient, without GlobEnc's × input).

The Jacobian is of the **whole layer** (attention, residual, LN#1, FFN, residual, LN#2), taken at
the real input of that layer for this sentence: other layers are not involved (single-layer,
"local" attribution). ``normalize=True`` (default, as every layer-wise map of :mod:`cmixlib`)
divides each row by its sum, :math:`\tilde c_{i \leftarrow j} = c_{i \leftarrow j} / \sum_k
c_{i \leftarrow k}`, as GlobEnc's HTA notebook does; ``normalize=False`` returns :math:`c`.

**How** (``method="closed"``, the default). One forward pass records each layer's input
:math:`x`, output and attention weights :math:`\alpha` (:func:`cmixlib.forward.encoder.run_and_capture`);
queries, keys and values are the layer's own projections of :math:`x`. In the notation of
:mod:`cmixlib.forward.encoder` (:math:`p_i = x_i + a_i`, :math:`y_i = \mathrm{LN}_1(p_i)`,
:math:`u_i = y_i + \mathrm{FFN}(y_i)`, :math:`o_i = \mathrm{LN}_2(u_i)`), the blocks are

.. math:: \frac{\partial o_i}{\partial x_j} = P_i \Big(\delta_{ij} I + \frac{\partial a_i}{\partial x_j}\Big),
          \qquad P_i = J_{\mathrm{LN}_2}(u_i)\,\big(I + W_2\, \mathrm{diag}(\phi'(W_1 y_i + b_1))\, W_1\big)\,
          J_{\mathrm{LN}_1}(p_i),

with :math:`J_{\mathrm{LN}}(w) = \mathrm{diag}(\gamma / \sigma(w))\,(I - \mathbf{1}\mathbf{1}^T/d
- \hat w \hat w^T / d)`, :math:`\hat w = (w - \bar w)/\sigma(w)`, and, per head :math:`h`
(:math:`s^h_{ik} = q^h_i \cdot k^h_k / \sqrt{d_h}` plus a constant mask,
:math:`\partial z^h_i / \partial s^h_{ik} = \alpha^h_{ik} (v^h_k - z^h_i)` for the softmax),

.. math:: \frac{\partial a_i}{\partial x_j} = \sum_h W_O^h \Big[ \alpha^h_{ij} W_V^h
          + \alpha^h_{ij} (v^h_j - z^h_i)\, u^{hT}_i
          + \delta_{ij} \sum_k \alpha^h_{ik} (v^h_k - z^h_i)\, \kappa^{hT}_k \Big],

:math:`z^h_i = \sum_k \alpha^h_{ik} v^h_k`, :math:`u^h_i = W_K^{hT} q^h_i / \sqrt{d_h}` (through
the key :math:`k_j`), :math:`\kappa^h_k = W_Q^{hT} k^h_k / \sqrt{d_h}` (through the query
:math:`q_i`); :math:`W_V^h, W_Q^h, W_K^h` are head :math:`h`'s :math:`d_h \times d` rows and
:math:`W_O^h` its :math:`d \times d_h` columns. The diagonal blocks :math:`j = i` are formed
explicitly. The others are never formed (nor the products :math:`P_i W_O W_V` of every head): with :math:`G_i = P_i W_O`, :math:`S_i = G_i^T G_i`,
:math:`\rho^h_{ij} = \alpha^h_{ij}(v^h_j - z^h_i)` and :math:`D_j = \mathrm{diag}(x_j)` (``I``
without × input), the block is :math:`X_{ij} + Y_{ij}`, :math:`X_{ij} = \sum_h \alpha^h_{ij} G^h_i
W_V^h`, :math:`Y_{ij} = \sum_h G^h_i \rho^h_{ij} u^{hT}_i`, and
:math:`c_{i \leftarrow j}^2 = \lVert X D_j \rVert_F^2 + 2 \langle X D_j, Y D_j \rangle + \lVert Y D_j \rVert_F^2` with

.. math:: \lVert X D_j \rVert_F^2 = \sum_{h h'} \alpha^h_{ij} \alpha^{h'}_{ij}
          \langle S^{hh'}_i, \Gamma^{hh'}_j \rangle,\ \Gamma_j = W_V D_j^2 W_V^T; \quad
          \langle X D_j, Y D_j \rangle = \sum_{hh'} \alpha^h_{ij} \big(W_V^h (u^{h'}_i \odot x_j^2)\big)^T
          S^{hh'}_i \rho^{h'}_{ij}; \quad
          \lVert Y D_j \rVert_F^2 = \sum_{hh'} \rho^{hT}_{ij} S^{hh'}_i \rho^{h'}_{ij}
          \sum_b u^h_{ib} u^{h'}_{ib} x_{jb}^2 .

:math:`\phi'` comes from the layer's own activation module (forward-mode derivative). The
arrangement of the work: :math:`P_i = \mathrm{diag}(s_i)\, C^{(2)}_i (\mathrm{diag}(\gamma_1) +
W_2 \Phi_i W_1 \mathrm{diag}(\gamma_1))\, C^{(1)}_i` is one GEMM per token (:math:`W_1
\mathrm{diag}(\gamma_1)` once per layer) followed by the two centrings :math:`C = I - [\mathbf{1},
\hat w][\mathbf{1}, \hat w]^T/d` as a single rank-4 update and the row scales :math:`s_i =
\gamma_2/(\sigma(u_i)\sigma(p_i))` (``_ffn_jacobians``); the symmetric :math:`S_i` and
:math:`\Gamma_j` are formed by blocks of rows on and above the diagonal only (``_block_gram``,
``_GRAM_ROWS``), and the double sum of :math:`\lVert X D_j \rVert_F^2` runs over the pairs
:math:`h \le h'` (twice the off-diagonal ones), for all rows in one batched product at the end.
Before using a layer, the closed form checks that recomposing the layer from its parts reproduces the
model's output (:meth:`cmixlib.forward.encoder.LayerState.recompute_output`) and that
:math:`\mathrm{softmax}(q k^T/\sqrt{d_h})` reproduces the model's attention weights, both within
``atol``; a layer that fails (not this post-LN layer, e.g. another attention scaling) is computed
with ``method="autograd"`` instead, with a warning. Exactness is tested against the full
:math:`(n d) \times (n d)` Jacobian of the Hugging Face layer (``torch.autograd.functional.jacobian``)
on every supported family in float64 (relative error about 1e-15; tests/test_hta.py); in float32
the off-diagonal :math:`c^2` is a sum of three terms rather than of squares, and its error stays
within the project's rule for float32 (no worse than an independent float32 computation).

Cost per layer, in multiply-adds: :math:`n (d^2 d_\mathrm{ff} + (2 + (K+1)/K)\, d^3 + H n d^2)`
(per output token the FFN Jacobian, :math:`G_i` and the diagonal block; :math:`S_i` and
:math:`\Gamma_j` (one per input token) by K blocks of rows, :math:`(K+1)/2K` of a :math:`d^3` product
each; the cross term), memory about ``chunk_size·n·d`` floats plus :math:`n d^2` for the
blocks :math:`h \le h'` of :math:`\Gamma_j` and :math:`S_i`. For MiniLM (d = 384, d_ff = 1536, K = 6) that is :math:`7.2\,d^3 + H n d^2` per
token against :math:`8\,d^3 + H n d^2` before the blocked Grams; this form needs at least
:math:`6\,d^3` (the FFN Jacobian, :math:`P_i W_O` and :math:`G_i N_{ii}` are products of full
matrices whatever the arrangement), so the rest of the gain can only come from overheads.
Measured with ``benchmarks/bench_hta.py --before`` (2026-11-26, AMD EPYC, **1 thread**, float32,
CPU time of the process, the packaged MiniLM, all 6 layers; a shared 2-core machine, load average
4-6.5): 25 tokens **1.98-2.11 s** against 2.39-2.54 s for the previous arrangement in the same
rounds (**1.17-1.21x**), 40 tokens 3.36-3.53 s against 3.99-4.26 s (1.17-1.20x), 64-68 GFLOP/s of
counted matmul work; the raw maps of the two differ by at most 1.9e-6 (values up to 13), and
their errors against the same model in float64 are the same (max 6.9e-6). Against
``"autograd"`` (the previous arrangement, 2026-11-25, wall clock, load average 3.2-5.1): 2.9-5.7 s
against 121-187 s for one 25-token sentence, 33-42x; a 70-token sentence: 17 s, about 150 MB of
extra memory.

**How** (``method="autograd"``). One ordinary forward pass of the model records, with forward
pre-hooks, each layer's input and the exact arguments the model passed to that layer module
(attention mask and any other keyword). The layer's Jacobian is then obtained by calling the
**same, unmodified Hugging Face layer module** with those arguments as a function of its
hidden-state input, through :func:`torch.func.vjp` with the cotangents of all output coordinates
of a group of output tokens batched by :func:`torch.func.vmap` (exactly ``n·d`` vector-Jacobian
products per layer, in chunks of about ``chunk_size``), reduced to :math:`c_{i \leftarrow j}`
chunk by chunk so that the :math:`(n d)^2` Jacobian is never held in memory. The replayed layer
must reproduce the model's own output for that layer (checked; it fails e.g. with dropout
active). Cost: ``n·d`` backward passes through one layer per layer, i.e. of order :math:`n^2 d^3`
per layer; GlobEnc reports about two hours for 256 sentences with BERT-base on a GPU (MiniLM on
1 CPU thread: the benchmark above).

**Inputs.** One unpadded sentence (the conventions of :func:`cmixlib.context_mixing`: text with a
tokenizer, or a mapping with ``input_ids`` of shape (1, n)); special tokens are ordinary positions
(rows and columns for ``[CLS]`` and ``[SEP]`` are included). Supported: the encoders that
:func:`cmixlib.forward.encoder.encoder_layers` reads (BERT, RoBERTa, ELECTRA, DistilBERT).
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
import torch

from cmixlib.forward.encoder import (LayerState, UnsupportedModelError, encoder_layers,
                                     layer_norm_scale, layer_states, record_layer_calls,
                                     run_and_capture)
from cmixlib.forward.encoding import encode
from cmixlib.forward.prepare import unpack_model
from cmixlib.methods.hta_autograd import HTAError, autograd_layer_hta, replay_layer
from cmixlib.models.devices import model_device
from cmixlib.validation import InputError, check_choice, check_rows

__all__ = ["hta", "HTAError", "METHODS"]

#: Values of ``hta(method=...)``: the closed form (default) and the vmapped vector-Jacobian products.
METHODS = ("closed", "autograd")


#: Rows per block (rounded down to whole heads, at least one) of the symmetric Grams S_i and
#: Gamma_j, formed block by block above the diagonal (:func:`_block_gram`).
_GRAM_ROWS = 64


class _NoClosedForm(Exception):
    """The layer is not the post-LN layer the closed form assumes (its recomposition or its
    attention weights differ from the model's own): the layer falls back to ``method="autograd"``."""


def _heads(lin: torch.nn.Linear, x: torch.Tensor, H: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A projection's per-head outputs ``(H, n, d_h)`` (bias included) and weights ``(H, d_h, d)``."""
    w = lin.weight
    return lin(x).view(x.shape[0], H, -1).transpose(0, 1), w.view(H, w.shape[0] // H, w.shape[1])


def _attention_terms(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w_q: torch.Tensor,
                     w_k: torch.Tensor, alpha: torch.Tensor, scale: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Per head (all ``(H, n, ·)``): :math:`z^h_i = \sum_k \alpha^h_{ik} v^h_k`, the key-side
    vectors :math:`u^h_i = W_K^{hT} q^h_i / \sqrt{d_h}` and the query-side vectors
    :math:`\kappa^h_k = W_Q^{hT} k^h_k / \sqrt{d_h}` (module docstring)."""
    return alpha @ v, scale * q @ w_k, scale * k @ w_q


def _ln_parts(ln: torch.nn.LayerNorm, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""LayerNorm at every token ``p`` (n, d): the gain :math:`\gamma` (d), :math:`1/\sigma(p_i)`
    (n, 1) and :math:`B_i^T = [\mathbf{1}, \hat p_i]^T` (n, 2, d), :math:`\hat p_i = (p_i - \bar
    p_i)/\sigma(p_i)`: the Jacobian is :math:`\mathrm{diag}(\gamma)(I - B_i B_i^T/d)/\sigma(p_i)`."""
    inv = 1.0 / layer_norm_scale(ln, p)
    gamma = ln.weight if ln.weight is not None else torch.ones_like(p[0])
    return gamma, inv, torch.stack([torch.ones_like(p), (p - p.mean(dim=-1, keepdim=True)) * inv], 1)


def _ffn_jacobians(w2: torch.Tensor, w1g: torch.Tensor, dphi: torch.Tensor, gamma1: torch.Tensor,
                   b1t: torch.Tensor, b2t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    r""":math:`P_i = J_{\mathrm{LN}_2}(u_i)(I + W_2 \Phi_i W_1) J_{\mathrm{LN}_1}(p_i) = \mathrm{diag}(s_i)
    \, C^{(2)}_i X_i C^{(1)}_i`, :math:`X_i = \mathrm{diag}(\gamma_1) + W_2 \Phi_i W_1
    \mathrm{diag}(\gamma_1)`, for r tokens (r, d, d): one GEMM (``w1g`` = :math:`W_1
    \mathrm{diag}(\gamma_1)`, ``dphi`` the rows of :math:`\Phi_i` (r, d_ff)), then both centrings
    as one rank-4 update, :math:`C^{(2)} X C^{(1)} = X - [B_2,\ X B_1 - B_2 (B_2^T X B_1)/d]\,
    [B_2^T X;\ B_1^T]/d` (``b1t``, ``b2t``: from :func:`_ln_parts`), and the row scales
    ``scale`` :math:`s_i = \gamma_2/(\sigma(u_i)\,\sigma(p_i))` (r, d)."""
    d = w2.shape[0]
    X = (w2 * dphi.unsqueeze(1)) @ w1g
    X.diagonal(dim1=-2, dim2=-1).add_(gamma1)
    b2 = b2t.transpose(1, 2)
    xb1 = X @ b1t.transpose(1, 2)                               # (r, d, 2)
    left = torch.cat([b2, xb1 - b2 @ (b2t @ xb1) / d], dim=-1)  # (r, d, 4)
    right = torch.cat([b2t @ X, b1t], dim=1)                    # (r, 4, d)
    return torch.baddbmm(X, left, right, alpha=-1.0 / d).mul_(scale.unsqueeze(-1))


def _block_gram(A: torch.Tensor, width: int, mirror: bool = True) -> torch.Tensor:
    r""":math:`A A^T` for a batch ``A`` (B, k, m), by blocks of ``width`` rows: only the blocks on
    and above the diagonal are multiplied (a fraction :math:`(K+1)/2K` of the flops of the full
    product, K blocks); ``mirror`` copies them below (else the lower blocks stay uninitialised)."""
    k = A.shape[1]
    out = A.new_empty(A.shape[0], k, k)
    for s in range(0, k, width):
        e = min(k, s + width)
        torch.matmul(A[:, s:e], A[:, s:].transpose(1, 2), out=out[:, s:e, s:])
        if mirror and e < k:
            out[:, e:, s:e] = out[:, s:e, e:].transpose(1, 2)
    return out


def _head_pairs(H: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Head pairs h <= h' and their multiplicity in a symmetric double sum (1 if h = h', else 2),
    on the device and in the dtype of ``like``."""
    hp, hq = torch.triu_indices(H, H, device=like.device)
    return hp, hq, (2.0 - (hp == hq).to(like.dtype))


def _pair_blocks(S: torch.Tensor, H: int, out: torch.Tensor) -> None:
    """Copy the blocks :math:`S^{hh'}` (h <= h', in :func:`_head_pairs` order) of a batch of
    (B, d_a, d_a) matrices into ``out`` (pairs, B, d_h^2), each block flattened."""
    B, da = S.shape[0], S.shape[1]
    dh = da // H
    S5, k = S.view(B, H, dh, H, dh), 0
    for h in range(H):
        out[k:k + H - h].view(H - h, B, dh, dh).copy_(S5[:, h, :, h:].permute(2, 0, 1, 3))
        k += H - h


def _rows_per_batch(chunk_size: int, n: int, d: int, d_ff: int, H: int) -> int:
    """Output tokens per batch of the closed form: its temporaries take about
    ``d d_ff + 5 d^2 + 3 H n d`` floats per token; ``chunk_size·n·d`` floats in all."""
    return max(1, int(chunk_size) * n * d // (d * d_ff + 5 * d * d + 3 * H * n * d))


def _closed_layer(st: LayerState, rows: np.ndarray, times_input: bool, chunk_size: int,
                  atol: float) -> np.ndarray:
    r"""``c[r, j]`` of one layer in closed form (module docstring, "How"): ``(len(rows), n)``."""
    m, x, H = st.mods, st.x, st.mods.num_heads
    n, d = x.shape
    tol = atol * max(1.0, float(st.o.abs().max()))
    err = float((st.recompute_output() - st.o).abs().max())
    if not err <= tol:
        raise _NoClosedForm(f"recomposing the layer from its parts missed its output by {err:.3g}")
    q, w_q = _heads(m.query, x, H)
    k, w_k = _heads(m.key, x, H)
    v, w_v = _heads(m.value, x, H)                              # (H, n, d_h), (H, d_h, d)
    dh = q.shape[-1]
    da = H * dh
    alpha = st.alpha
    err = float((torch.softmax(q @ k.transpose(1, 2) * dh ** -0.5, dim=-1) - alpha).abs().max())
    if not err <= atol:
        raise _NoClosedForm(f"softmax(q k^T / sqrt(d_h)) missed the model's attention by {err:.3g}")
    z, u, kappa = _attention_terms(q, k, v, w_q, w_k, alpha, dh ** -0.5)
    gamma1, inv1, bt1 = _ln_parts(m.ln1, st.ln1_input)
    gamma2, inv2, bt2 = _ln_parts(m.ln2, st.ln2_input)
    scale = gamma2 * inv2 * inv1                                # s_i = gamma2 / (sigma(u_i) sigma(p_i))
    pre = m.ffn_in(st.ln1_output)
    _, dphi = torch.func.jvp(m.act, (pre,), (torch.ones_like(pre),))   # act'(pre): act is elementwise
    w1, w2, w_o = m.ffn_in.weight, m.ffn_out.weight, m.out.weight     # (d_ff, d), (d, d_ff), (d, d_a)
    w1g, wv = w1 * gamma1, w_v.reshape(da, d)
    x2 = x * x if times_input else torch.ones_like(x)           # x_j^2 (or 1): the column weights
    xs = x if times_input else torch.ones_like(x[:1])
    width = dh * max(1, _GRAM_ROWS // dh)                       # row blocks of the symmetric Grams
    hp, hq, mult = _head_pairs(H, x)
    gam = x.new_empty(len(hp), len(xs), dh * dh)                # Gamma_j^{hh'} = W_V^h D_j^2 W_V^h'T, h <= h'
    for j in range(0, len(xs), 8):
        _pair_blocks(_block_gram(wv * xs[j:j + 8].unsqueeze(1), width, mirror=False), H,
                     gam[:, j:j + 8])
    s_pairs = x.new_empty(len(hp), len(rows), dh * dh)          # S_i^{hh'}, h <= h'
    diag = x.new_empty(len(rows))
    csq = x.new_empty(len(rows), n)
    per = _rows_per_batch(chunk_size, n, d, w1.shape[0], H)
    for s in range(0, len(rows), per):
        idx = torch.as_tensor(rows[s:s + per], device=x.device)
        r, ar = len(idx), torch.arange(len(idx), device=x.device)
        P = _ffn_jacobians(w2, w1g, dphi[idx], gamma1, bt1[idx], bt2[idx], scale[idx])
        Gt = torch.matmul(w_o.t(), P.transpose(1, 2))           # G_i^T = (P_i W_O)^T  (r, d_a, d)
        S = _block_gram(Gt, width)                              # S_i = G_i^T G_i  (r, d_a, d_a)
        _pair_blocks(S, H, s_pairs[:, s:s + r])
        a = alpha[:, idx].transpose(0, 1)                       # alpha^h_ij  (r, H, n)
        u_i = u[:, idx].transpose(0, 1)                         # (r, H, d)
        rho = a.unsqueeze(-1) * (v.unsqueeze(0) - z[:, idx].transpose(0, 1).unsqueeze(2))  # (r, H, n, d_h)
        # omega_ij^{h'} = S_i rho^h'_ij, i.e. rho^h'T S^h'. by symmetry: (r, H', n, d_a)
        om = rho @ S.view(r, H, dh, da)
        # 2 <X D, Y D> = 2 sum_hh' alpha^h_ij <W_V^h (u^h'_i * x_j^2), omega^{h'}_ij block h>
        beta = (u_i.unsqueeze(2) * x2) @ wv.t()                 # (r, H', n, d_a)
        arep = a.transpose(1, 2).repeat_interleave(dh, dim=-1)  # alpha^h_ij on block h  (r, n, d_a)
        cs = 2 * ((om * beta).sum(1) * arep).sum(-1)
        # ||Y D||^2: sum_hh' <rho^h, S^hh' rho^h'> sum_b u^h_b u^h'_b x_jb^2
        uu = ((u_i.unsqueeze(2) * u_i.unsqueeze(1)).reshape(r, H * H, d) @ x2.t()).view(r, H, H, n)
        rsr = (om.view(r, H, n, H, dh) * rho.transpose(1, 2).unsqueeze(1)).sum(-1)   # (r, H', n, H)
        csq[s:s + r] = cs + (rsr * uu.transpose(2, 3)).sum((1, 3))
        # diagonal blocks j = i in full: P_i + G_i N_ii, N_ii = alpha_ii W_V + rho_ii u_i^T + sum_k rho_ik kappa_k^T
        N = rho.transpose(-1, -2) @ kappa                       # (r, H, d_h, d)
        N.addcmul_(a[ar, :, idx][..., None, None], w_v).addcmul_(rho[ar, :, idx].unsqueeze(-1), u_i.unsqueeze(2))
        Zd = torch.baddbmm(P, Gt.transpose(1, 2), N.view(r, da, d))
        if times_input:
            Zd.mul_(x[idx].unsqueeze(1))
        diag[s:s + r] = Zd.square_().sum((1, 2))
    # ||X D||^2 of every row: sum_{h<=h'} mult alpha^h_ij alpha^h'_ij <S_i^hh', Gamma_j^hh'>
    a = alpha[:, torch.as_tensor(rows, device=x.device)]       # (H, rows, n)
    csq += (a[hp] * a[hq] * mult[:, None, None] * (s_pairs @ gam.transpose(1, 2))).sum(0)
    ar = torch.arange(len(rows), device=x.device)
    csq[ar, torch.as_tensor(rows, device=x.device)] = diag
    return csq.clamp_min(0).sqrt().double().cpu().numpy()


def hta(model: Any, tokenizer: Any, text: Any, *, times_input: bool = True, normalize: bool = True,
        layers: Sequence[int] | None = None, rows: Sequence[int] | None = None, chunk_size: int = 512,
        atol: float = 1e-4, method: str = "closed") -> np.ndarray:
    r"""HTA × input maps of every layer for one sentence: array ``(L, n, n)``, row i = output token.

    .. math:: c^{\ell}_{i \leftarrow j} = \lVert (\partial e^{\ell}_i / \partial e^{\ell-1}_j)
              \odot e^{\ell-1}_j \rVert_F

    (module docstring). ``model, tokenizer, text`` as in :func:`cmixlib.context_mixing` (a
    :class:`~cmixlib.models.loading.ModelBundle` and None is fine), but one unpadded sentence only.
    ``times_input=False``: :math:`\lVert \partial e^{\ell}_i / \partial e^{\ell-1}_j \rVert_F`.
    ``normalize``: rows divided by their sums (default). ``layers``: 0-based indices of the layers
    to compute (default all; the others are NaN). ``rows``: only these output tokens (the others are
    NaN); the cost is proportional to the number of rows. ``chunk_size``: memory, about
    ``chunk_size·n·d`` floats at once (``method="autograd"``: that many vector-Jacobian products
    in one vmapped batch; ``"closed"``: as many output tokens at once as fit, each taking about
    ``d·d_ff + 5 d² + 3 H n d`` floats). ``atol``:
    tolerance (relative to the largest output value) of the replay check. ``method``:
    ``"closed"`` (default, the Jacobian blocks in closed form) or ``"autograd"`` (vmapped
    vector-Jacobian products through the Hugging Face layer, :mod:`cmixlib.methods.hta_autograd`);
    a layer that the closed form does not reproduce falls back to ``"autograd"`` with a warning.
    """
    model, tokenizer = unpack_model(model, tokenizer)
    check_choice(method, METHODS, "method")
    if not isinstance(model, torch.nn.Module):
        raise InputError("hta needs a Hugging Face encoder (or a ModelBundle).")
    if model.training:
        raise HTAError("The model is in training mode (dropout is active): call model.eval() first.")
    if int(chunk_size) < 1:
        raise InputError(f"chunk_size must be >= 1, got {chunk_size}.")
    mods = encoder_layers(model)
    ids, mask, is_batch = encode(model, tokenizer, text)
    if is_batch or ids.shape[0] != 1:
        raise InputError("hta takes one sentence at a time (its cost grows with n^2 per layer); loop over a batch.")
    if int(mask.sum()) != ids.shape[1]:
        raise InputError("hta takes an unpadded sentence: drop the padded positions (attention_mask == 0).")
    n = ids.shape[1]
    row_idx = check_rows(rows, n, "rows", negative=True)   # -n..n-1, from the end
    row_idx = np.arange(n) if row_idx is None else row_idx
    L = len(mods)
    todo = list(range(L)) if layers is None else sorted({int(k) % L for k in layers})
    if layers is not None and any(not -L <= int(k) < L for k in layers):
        raise InputError(f"layers={list(layers)} out of range for a model with {L} layers (0..{L - 1}).")
    device = model_device(model)
    ids, mask = ids.to(device), mask.to(device)
    states = None
    if method == "closed":
        try:
            states = layer_states(run_and_capture(model, ids, mask), mods, 0, torch.arange(n, device=device))
        except UnsupportedModelError as exc:     # e.g. no attention weights (no eager attention)
            warnings.warn(f"hta: {exc} Computing every layer with method='autograd'.", stacklevel=2)
    calls = None
    out = np.full((L, n, n), np.nan)
    for k in todo:
        c = None
        if states is not None:
            try:
                with torch.no_grad():
                    c = _closed_layer(states[k], row_idx, times_input, chunk_size, atol)
            except _NoClosedForm as exc:
                warnings.warn(f"hta: layer {k} is not the post-LN layer of the closed form ({exc}); "
                              "computing it with method='autograd'.", stacklevel=2)
        if c is None:
            calls = record_layer_calls(model, ids, mask) if calls is None else calls
            args, kwargs, expected = calls[k]
            f, x = replay_layer(mods[k].layer, args, kwargs)
            c = autograd_layer_hta(f, x.detach(), expected[0].detach(), row_idx, times_input,
                                   chunk_size, atol)
        if normalize:
            total = c.sum(axis=-1, keepdims=True)
            c = np.where(total > 0, c / np.where(total > 0, total, 1.0), np.nan)
        out[k][row_idx] = c
    return out
