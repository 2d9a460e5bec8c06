"""HTA × input in closed form (``cmixlib.hta``, ``method="closed"``) against an independent slow
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
import cmixlib.hta as H
from cmixlib.encoder import UnsupportedModelError, encoder_layers, layer_output, record_layer_calls
from cmixlib.hta import hta
from cmixlib.validation import InputError
from tolerances import assert_no_worse_than_baseline

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ARCHS = ["bert", "roberta", "electra", "distilbert", "mpnet"]
REL64 = 1e-9          # float64 closed form against the full Jacobian (measured: about 1e-15)


def _model(arch, dtype=torch.float64, sharpen=12.0, **kw):
    """A tiny random model; random_model perturbs LayerNorm gains/biases and linear biases
    (cmixlib.models.perturb_norms_and_biases), so none of them is trivially 1 or 0. The query and
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
