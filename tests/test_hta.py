"""HTA × input in closed form (``cmixlib.methods.hta``, ``method="closed"``) against an independent slow
reference: the full ``(n d) x (n d)`` Jacobian of each Hugging Face layer module, replayed with the
arguments the model called it with, by ``torch.autograd.functional.jacobian``; then the Frobenius
norms of its ``d x d`` blocks. Float64 models must agree to 1e-9 relative; float32 ones follow
rule 2 of tests/tolerances.py. Planted bugs (a term of the derivative dropped) must fail.

(The autograd path, ``method="autograd"``, is also tested in tests/test_experiments_more.py.)
"""
import numpy as np
import pytest
import torch

import cmixlib
import cmixlib.methods.hta as H
from cmixlib.forward.encoder import (UnsupportedModelError, encoder_layers, layer_output,
                                     record_layer_calls)
from cmixlib.methods.hta import hta
from cmixlib.validation import InputError
from tolerances import assert_no_worse_than_baseline

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ARCHS = ["bert", "roberta", "electra", "distilbert", "mpnet"]
REL64 = 1e-9          # float64 closed form against the full Jacobian (measured: about 1e-15)


def _model(arch, dtype=torch.float64, sharpen=12.0, **kw):
    """A tiny random model; random_model perturbs LayerNorm gains/biases and linear biases
    (cmixlib.models.random_models.perturb_norms_and_biases), so none of them is trivially 1 or 0. The query and
    key weights are multiplied by ``sharpen``: with the initialisation's small weights the
    attention is almost uniform and the terms of the derivative through the attention weights
    (through the queries and the keys) would be too small to test."""
    kw = {"layers": 2, "hidden": 24, "heads": 3, "seed": 3, **kw}
    model = cmixlib.random_model(arch, dtype=dtype, **kw)
    with torch.no_grad():
        for parts in encoder_layers(model):
            parts.query.weight.mul_(sharpen)
            parts.key.weight.mul_(sharpen)
    return model


def _ids(arch, n=7, seed=0):
    rng = np.random.default_rng(seed)
    first = 0 if arch == "roberta" else 1
    return torch.tensor([[first] + rng.integers(5, 100, n - 2).tolist() + [2]])


def _reference(model, ids, times_input=True, mask=None):
    """Per layer, the full Jacobian of the layer module called as the model called it (recorded
    arguments, attention mask included), then ||J[i, :, j, :] * x_j||_F for every block."""
    maps = []
    for (args, kwargs, _), parts in zip(record_layer_calls(model, ids, mask), encoder_layers(model)):
        x = (args[0] if args else kwargs["hidden_states"])[0].detach()

        def f(z, layer=parts.layer, args=args, kwargs=kwargs):
            if args:
                o = layer(z.unsqueeze(0), *args[1:], **kwargs)
            else:
                o = layer(*args, **{**kwargs, "hidden_states": z.unsqueeze(0)})
            return layer_output(o)[0]

        J = torch.autograd.functional.jacobian(f, x)            # (n, d, n, d)
        if times_input:
            J = J * x[None, None, :, :]
        maps.append(torch.linalg.vector_norm(J, dim=(1, 3)).double().numpy())
    return np.stack(maps)


def _rel(a, b):
    return float(np.nanmax(np.abs(a - b)) / np.nanmax(np.abs(b)))


@pytest.mark.parametrize("arch", ARCHS)
def test_closed_form_equals_full_jacobian_float64(arch):
    model, ids = _model(arch), _ids(arch)
    for times_input in (True, False):
        ref = _reference(model, ids, times_input)
        got = hta(model, None, {"input_ids": ids}, normalize=False, times_input=times_input)
        assert _rel(got, ref) <= REL64, (arch, times_input, _rel(got, ref))
    # an explicit attention mask of the (single, unpadded) sentence: same maps
    mask = torch.ones_like(ids)
    got = hta(model, None, {"input_ids": ids, "attention_mask": mask}, normalize=False)
    assert _rel(got, _reference(model, ids, True, mask)) <= REL64


def test_rows_layers_chunks_and_normalisation_float64():
    model = _model("bert", layers=3, hidden=36, heads=6)
    ids = _ids("bert", n=9, seed=2)
    ref = _reference(model, ids)
    per_row = 36 * 144 + 5 * 36 ** 2 + 3 * 6 * 9 * 36           # floats per row (H._rows_per_batch)
    chunks = [-(-k * per_row // (9 * 36)) for k in (1, 2, 4, 9)]  # 1, 2, 4 (uneven last batch), all rows
    assert [H._rows_per_batch(c, 9, 36, 144, 6) for c in chunks] == [1, 2, 4, 9]
    for chunk in chunks:
        got = hta(model, None, {"input_ids": ids}, normalize=False, chunk_size=chunk)
        assert _rel(got, ref) <= REL64, chunk
    part = hta(model, None, {"input_ids": ids}, normalize=False, rows=[0, 4, -1], layers=[2, 0])
    assert np.isnan(part[1]).all() and np.isnan(part[[0, 2]][:, [1, 2, 3, 5, 6, 7]]).all()
    for k in (0, 2):
        assert _rel(part[k, [0, 4, 8]], ref[k, [0, 4, 8]]) <= REL64
    norm = hta(model, None, {"input_ids": ids}, layers=[1])
    np.testing.assert_allclose(norm[1], ref[1] / ref[1].sum(-1, keepdims=True), rtol=1e-10)


@pytest.mark.parametrize("rows_per_block", [1, 16])
def test_block_grams_float64(rows_per_block, monkeypatch):
    """The symmetric Grams S_i and Gamma_j formed by blocks of rows above the diagonal: with one
    head per block (many blocks) and two heads per block (6 heads: three blocks; 5 heads: the last
    block half full) the maps still equal the full Jacobian's."""
    monkeypatch.setattr(H, "_GRAM_ROWS", rows_per_block)
    for heads in (6, 5):
        model = _model("bert", hidden=8 * heads, heads=heads)
        ids = _ids("bert", n=7, seed=heads)
        for times_input in (True, False):
            got = hta(model, None, {"input_ids": ids}, normalize=False, times_input=times_input)
            assert _rel(got, _reference(model, ids, times_input)) <= REL64, (heads, times_input)


def test_block_gram_and_pair_blocks_helpers():
    """_block_gram against A A^T (widths that do and do not divide the size; without mirroring
    only the blocks on and above the diagonal are defined); _pair_blocks against plain slicing."""
    A = torch.randn(3, 12, 5, dtype=torch.float64)
    full = A @ A.transpose(1, 2)
    for width in (1, 4, 5, 12, 20):
        torch.testing.assert_close(H._block_gram(A, width), full, rtol=0, atol=1e-12)
        upper = H._block_gram(A, width, mirror=False)
        for s in range(0, 12, width):
            torch.testing.assert_close(upper[:, s:s + width, s:], full[:, s:s + width, s:], rtol=0, atol=1e-12)
    heads, dh = 4, 3
    hp, hq, mult = H._head_pairs(heads, full)
    assert len(hp) == heads * (heads + 1) // 2 and bool((hp <= hq).all())
    assert mult.tolist() == [1.0 if a == b else 2.0 for a, b in zip(hp.tolist(), hq.tolist())]
    out = torch.empty(len(hp), 3, dh * dh, dtype=torch.float64)
    H._pair_blocks(full, heads, out)
    for k, (a, b) in enumerate(zip(hp.tolist(), hq.tolist())):
        block = full[:, a * dh:(a + 1) * dh, b * dh:(b + 1) * dh]
        torch.testing.assert_close(out[k], block.reshape(3, dh * dh), rtol=0, atol=0)


def test_ffn_jacobians_against_the_product_of_jacobians():
    """P_i (one GEMM, the two centrings as one rank-4 update, the row scales) against the product
    J_LN2 (I + W2 diag(phi') W1) J_LN1 built from torch.func.jacrev of the two LayerNorms."""
    torch.manual_seed(0)
    d, dff, r = 6, 10, 3
    ln1, ln2 = torch.nn.LayerNorm(d).double(), torch.nn.LayerNorm(d).double()
    with torch.no_grad():
        for ln in (ln1, ln2):
            ln.weight.normal_()
    w1, w2 = torch.randn(dff, d, dtype=torch.float64), torch.randn(d, dff, dtype=torch.float64)
    p, u, dphi = (torch.randn(r, k, dtype=torch.float64) for k in (d, d, dff))
    g1, i1, y1 = H._ln_parts(ln1, p)                          # y: the centring bases B^T
    g2, i2, y2 = H._ln_parts(ln2, u)
    got = H._ffn_jacobians(w2, w1 * g1, dphi, g1, y1, y2, g2 * i2 * i1)
    for k in range(r):
        j1, j2 = torch.func.jacrev(ln1)(p[k]), torch.func.jacrev(ln2)(u[k])
        want = j2 @ (torch.eye(d, dtype=torch.float64) + w2 @ torch.diag(dphi[k]) @ w1) @ j1
        torch.testing.assert_close(got[k], want, rtol=1e-12, atol=1e-12)


def test_other_activation_and_heads():
    # gelu_new (tanh GELU) and relu: the activation's derivative comes from the module itself
    ids = _ids("bert", n=6, seed=4)
    for act in ("gelu_new", "relu"):
        model = _model("bert", hidden=32, heads=8, hidden_act=act)
        got = hta(model, None, {"input_ids": ids}, normalize=False)
        assert _rel(got, _reference(model, ids)) <= REL64, act


def test_closed_equals_autograd_method_float64():
    model, ids = _model("electra", layers=2), _ids("electra", n=6)
    a = hta(model, None, {"input_ids": ids}, method="autograd")
    c = hta(model, None, {"input_ids": ids}, method="closed")
    assert _rel(c, a) <= REL64


@pytest.mark.parametrize("arch", ["bert", "distilbert"])
def test_closed_form_float32_rule2(arch):
    """Rule 2: the float64 reference on the same weights is the truth, the float32 reference (an
    independent float32 computation: autograd through the HF layer) the baseline."""
    model32 = _model(arch, dtype=torch.float32, hidden=32, heads=4)
    model64 = _model(arch, dtype=torch.float64, hidden=32, heads=4)
    ids = _ids(arch, n=8, seed=1)
    for times_input in (True, False):
        got = hta(model32, None, {"input_ids": ids}, normalize=False, times_input=times_input)
        assert_no_worse_than_baseline(got, _reference(model64, ids, times_input),
                                      _reference(model32, ids, times_input),
                                      err_msg=f"closed-form HTA {arch} times_input={times_input}")


@pytest.mark.parametrize("bug", ["query", "key"])
def test_planted_bug_is_caught(bug, monkeypatch):
    """Dropping the delta_ij term through the query (kappa = 0) or the rank-H term through the
    keys (u = 0) of the attention derivative must make the float64 comparison fail by far."""
    model, ids = _model("bert"), _ids("bert")
    ref = _reference(model, ids)
    assert _rel(hta(model, None, {"input_ids": ids}, normalize=False), ref) <= REL64
    real = H._attention_terms

    def planted(*args):
        z, u, kappa = real(*args)
        return (z, u, torch.zeros_like(kappa)) if bug == "query" else (z, torch.zeros_like(u), kappa)

    monkeypatch.setattr(H, "_attention_terms", planted)
    err = _rel(hta(model, None, {"input_ids": ids}, normalize=False), ref)
    assert err > 1e3 * REL64, (bug, err)
    # the float32 comparison (rule 2) fails too
    model32 = _model("bert", dtype=torch.float32)
    with pytest.raises(AssertionError, match="exceeds"):
        assert_no_worse_than_baseline(hta(model32, None, {"input_ids": ids}, normalize=False), ref,
                                      _reference(model32, ids), err_msg="planted bug")


def test_fallback_to_autograd_when_the_layer_differs():
    """A layer that is not the closed form's (here: attention scores scaled differently from
    1/sqrt(d_h)) is detected by the attention check and computed with autograd, with a warning."""
    model, ids = _model("bert"), _ids("bert")
    model.base_model.encoder.layer[1].attention.self.scaling = 0.3
    ref = _reference(model, ids)
    with pytest.warns(UserWarning, match="layer 1 .*autograd"):
        got = hta(model, None, {"input_ids": ids}, normalize=False)
    assert _rel(got, ref) <= REL64


def test_fallback_when_attention_weights_cannot_be_captured(monkeypatch):
    model, ids = _model("roberta"), _ids("roberta")
    ref = _reference(model, ids)

    def no_capture(*args, **kwargs):
        raise UnsupportedModelError("The model did not return attention weights.")

    monkeypatch.setattr(H, "run_and_capture", no_capture)
    with pytest.warns(UserWarning, match="every layer with method='autograd'"):
        got = hta(model, None, {"input_ids": ids}, normalize=False)
    assert _rel(got, ref) <= REL64


def test_method_is_validated():
    model, ids = _model("bert"), _ids("bert")
    with pytest.raises(InputError, match="method must be one of 'closed', 'autograd'"):
        hta(model, None, {"input_ids": ids}, method="jacobian")
    with pytest.raises(TypeError, match="method must be a string"):
        hta(model, None, {"input_ids": ids}, method=None)
