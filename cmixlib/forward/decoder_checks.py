"""The identities the decoder path relies on, checked (refuse rather than guess): what
:func:`check_decoder_model` refuses before a forward pass (an unlisted family, an unsupported
dtype) and what :func:`check_capture` asserts on every captured pass of
:func:`cmixlib.forward.decoder.run_decoder` (the declared norms, the residual adds, the per-source
decomposition, the logits), each to a bound derived from its computation at float32's unit
roundoff (:data:`CHECK_EPS`). A failure is a :class:`DecompositionError` naming the model
(:func:`model_name`); :mod:`cmixlib.methods.alti_logit` checks its reconstruction the same way.
Notation of :mod:`cmixlib.forward.decoder`.
"""
from __future__ import annotations

from typing import Any

import torch

from cmixlib.models.arch import (DecoderParts, UnsupportedModelError, apply_decoder_norm,
                                 decoder_final_norm, decoder_logits_divisor, decoder_parts,
                                 decoder_unembed, require_decoder)

__all__ = ["SUPPORTED_DTYPES", "DecompositionError", "model_name", "check_decoder_model",
           "CHECK_EPS", "check_identity", "check_capture"]

#: Parameter dtypes the decoder path computes in (others are refused: :func:`check_decoder_model`).
SUPPORTED_DTYPES = (torch.float32, torch.float64)


class DecompositionError(UnsupportedModelError):
    """An identity the decoder methods rely on failed on this model's captured forward pass
    (the family's declaration does not describe the model): the message names the model, the
    identity, the layer and the size of the failure."""


def model_name(model: torch.nn.Module) -> str:
    """How the errors name a model: its class, ``model_type`` and checkpoint path."""
    cfg = getattr(model, "config", None)
    path = getattr(cfg, "name_or_path", "") or ""
    return (f"{type(model).__name__} (model_type={getattr(cfg, 'model_type', None)!r}"
            + (f", {path!r}" if path else "") + ")")


def check_decoder_model(model: torch.nn.Module) -> list[DecoderParts]:
    """Refuse, before any forward pass, what the decoder path cannot compute exactly: an
    unlisted ``model_type`` or refused setting (:func:`cmixlib.models.arch.require_decoder`), a
    parameter dtype other than float32/float64 (bfloat16 and float16 give maps at a few bits of
    precision, and numpy has no bfloat16). Returns the layers' :class:`DecoderParts`."""
    require_decoder(model)
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    bad = sorted(str(d) for d in dtypes if d not in SUPPORTED_DTYPES)
    if bad:
        raise UnsupportedModelError(
            f"{model_name(model)} has {', '.join(bad)} parameters; the decoder methods compute "
            "in float32 or float64 only: convert a copy first, e.g. model.to(torch.float32).")
    return decoder_parts(model)


#: Unit roundoff of the identity checks: float32's, whatever the model's dtype (HF computes
#: softmax, RoPE and several norms in float32 even inside float64 models).
CHECK_EPS = float(torch.finfo(torch.float32).eps)


def check_identity(ok_err: torch.Tensor, bound: torch.Tensor, what: str,
                   model: torch.nn.Module) -> None:
    """Raise :class:`DecompositionError` (naming ``model`` and the identity ``what``) where an
    error ``ok_err`` exceeds its ``bound``."""
    excess = (ok_err - bound).max()
    if not bool(excess <= 0):
        worst = float(ok_err.max())
        raise DecompositionError(
            f"{model_name(model)}: the identity {what} fails (largest error {worst:.3g}, "
            f"allowed {float(bound.max()):.3g}), so its family declaration in "
            "cmixlib.models.arch.DECODER_FAMILIES does not describe this model and the maps would be "
            "wrong; refusing rather than guessing.")


@torch.no_grad()
def check_capture(cap: Any, model: torch.nn.Module) -> None:
    """Assert, on one captured pass, the identities every decoder method relies on, each to a
    bound derived from its computation at unit roundoff u = :data:`CHECK_EPS`
    (gamma_K = K u / (1 - K u)); raise :class:`DecompositionError` naming the model otherwise:

    - the declared norms: LN1(x_i) = ln1_out_i, LN2(m_i) = ln2_out_i, final_norm(x^L_i) =
      final_norm_out_i (within gamma_(d+8) max|out|);
    - the residual adds: m_i = x_i + r a_i and x'_i = m_i + r g_i (within ``gamma_2 |terms|``);
    - the decomposition: sum_j F_ij + r b_O = r a_i (within gamma_(n + H d_h + 2) times the sum
      of the absolute terms);
    - the logits at the first and last rows: (final_norm_out_i U^T + b) / s = logits_i (within
      gamma_(d+2) times the absolute terms).
    """
    def gam(k: int) -> float:
        return k * CHECK_EPS / (1 - k * CHECK_EPS)

    for k, st in enumerate(cap.layers):
        p, r = st.parts, st.parts.residual_multiplier
        d = st.resid_in.shape[-1]
        for name, inp, out in (("LN1", st.resid_in, st.ln1_out), ("LN2", st.resid_mid, st.ln2_out)):
            want = apply_decoder_norm(p.family, getattr(p, name.lower()), inp, p.w_o)
            check_identity((want - out).abs(), gam(d + 8) * out.abs().amax(),
                   f"{name}(h) = the {p.family.norm} declared for {p.family.name} "
                   f"(gain {p.family.norm_gain}) at layer {k}", model)
        for what, total, a, b in (("m = x + r a", st.resid_mid, st.resid_in, st.attn_out),
                                  ("x' = m + r g", st.resid_out, st.resid_mid, st.mlp_out)):
            rb = b if r == 1.0 else b * r
            check_identity((a + rb - total).abs(), gam(2) * (a.abs() + rb.abs()) + 1e-300,
                   f"{what} at layer {k} (residual multiplier r = {r:g})", model)
        w_o = p.w_o
        mix = torch.einsum("hij,hjk->ihk", st.attn_weights, st.values).reshape(st.n, -1)
        mag = torch.einsum("hij,hjk->ihk", st.attn_weights.abs(), st.values.abs()).reshape(
            st.n, -1) @ w_o.abs().t()
        rec = mix @ w_o.t()
        if p.b_o is not None:
            rec, mag = rec + p.b_o, mag + p.b_o.abs()
        ra = st.attn_out if r == 1.0 else st.attn_out * r
        rec = rec if r == 1.0 else rec * r
        check_identity((rec - ra).abs(), gam(st.n + p.num_heads * p.head_dim + 2) * (abs(r) * mag
                                                                            + ra.abs()),
               f"sum_j F_ij + r b_O = r a_i (values from u_j alone) at layer {k}", model)
        st.release()
    fam = cap.layers[0].parts.family
    norm = decoder_final_norm(model)
    fin, fout = cap.final_norm_in, cap.final_norm_out
    want = apply_decoder_norm(fam, norm, fin, cap.layers[0].parts.w_o)
    d = fin.shape[-1]
    check_identity((want - fout).abs(), gam(d + 8) * fout.abs().amax(),
           f"final_norm(h) = the declared {fam.norm} (gain {fam.norm_gain})", model)
    if cap.logits is not None:
        head = decoder_unembed(model)
        rows = torch.tensor(sorted({0, cap.logits.shape[0] - 1}), device=fout.device)
        s = decoder_logits_divisor(model)
        z = fout[rows] @ head.weight.t()
        mag = fout[rows].abs() @ head.weight.abs().t()
        if head.bias is not None:
            z, mag = z + head.bias, mag + head.bias.abs()
        z, mag = z / s, mag / abs(s)
        got = cap.logits[rows]
        check_identity((z - got).abs(), gam(d + 3) * (mag + got.abs()),
               f"logits = unembed(final_norm(x)) / {s:g}", model)
