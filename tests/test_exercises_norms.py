"""Chapter 4's exercise: the N-ResLN map of one layer from its parts (check_n_res_ln)."""
import pytest
import torch

import cmix_course as ex
from cmix_course.norm_exercises import reference_n_res_ln


def _states(arch: str):
    import cmixlib
    from cmixlib.forward.encoder import (encoder_layers, iter_sentences, layer_states,
                                         run_and_capture)

    model = cmixlib.random_model(arch, dtype=torch.float64, seed=5)
    ids = torch.randint(5, 100, (1, 7), generator=torch.Generator().manual_seed(5))
    cap = run_and_capture(model, ids, torch.ones_like(ids))
    return layer_states(cap, encoder_layers(model), 0, iter_sentences(cap)[0])


@pytest.mark.parametrize("arch", ["bert", "electra"])
def test_reference_matches_the_library(arch):
    from cmixlib.methods import norms

    for st in _states(arch):
        parts = (st.alpha, st.head_vectors, st.x, st.mods.out.bias, st.mods.ln1)
        with torch.no_grad():
            for stage, lib in [("n", norms.attn_norm), ("n_res", norms.attn_norm_res),
                               ("n_res_ln", norms.attn_norm_res_ln)]:
                torch.testing.assert_close(reference_n_res_ln(*parts, stage=stage), lib(st),
                                           rtol=1e-9, atol=1e-12)


def test_reference_rejects_an_unknown_stage():
    st = _states("bert")[0]
    with pytest.raises(ValueError, match="stage must be one of"):
        reference_n_res_ln(st.alpha, st.head_vectors, st.x, st.mods.out.bias, st.mods.ln1,
                           stage="n_enc")


def solution(alpha, fx, x, b_O, ln1):
    """The notebook's solution (chapter 4, exercise 4.1)."""
    F = torch.einsum("hij,hjd->ijd", alpha, fx)                  # F_ij
    z = F + torch.diag_embed(x.T).permute(1, 2, 0)               # + delta_ij x_i
    p = z.sum(1) + b_O                                           # p_i, the LN1 input
    s = torch.sqrt(p.var(-1, unbiased=False) + ln1.eps)          # sigma(p_i)
    T = ln1.weight * (z - z.mean(-1, keepdim=True)) / s[:, None, None]
    return torch.linalg.vector_norm(T, dim=-1)


def test_checker_passes_the_solution(capsys):
    res = ex.check_n_res_ln(solution)
    assert res and res.status == "passed"
    assert "all checks passed" in capsys.readouterr().out
    assert sum("matches the reference" in m for m in res.messages) == 2   # both cases ran


def _no_residual(alpha, fx, x, b_O, ln1):
    return solution(alpha, fx, torch.zeros_like(x), b_O, ln1)


def _n_res(alpha, fx, x, b_O, ln1):
    F = torch.einsum("hij,hjd->ijd", alpha, fx)
    return torch.linalg.vector_norm(F + torch.diag_embed(x.T).permute(1, 2, 0), dim=-1)


def _transposed(alpha, fx, x, b_O, ln1):
    return solution(alpha.transpose(-1, -2), fx, x, b_O, ln1)


def _sigma_without_bias(alpha, fx, x, b_O, ln1):
    return solution(alpha, fx, x, torch.zeros_like(b_O), ln1)


def _beta_added(alpha, fx, x, b_O, ln1):
    F = torch.einsum("hij,hjd->ijd", alpha, fx)
    z = F + torch.diag_embed(x.T).permute(1, 2, 0)
    s = torch.sqrt((z.sum(1) + b_O).var(-1, unbiased=False) + ln1.eps)
    T = ln1.weight * (z - z.mean(-1, keepdim=True)) / s[:, None, None] + ln1.bias
    return torch.linalg.vector_norm(T, dim=-1)


def _normalised(alpha, fx, x, b_O, ln1):
    m = solution(alpha, fx, x, b_O, ln1)
    return m / m.sum(-1, keepdim=True)


@pytest.mark.parametrize("wrong, phrase", [
    (_no_residual, "the residual x_i is missing"),
    (_n_res, "this is N-Res"),
    (_transposed, "read transposed"),
    (_sigma_without_bias, "computed without b_O"),
    (_beta_added, "beta_1 (ln1.bias) was added"),
    (_normalised, "rows were normalised"),
])
def test_checker_names_the_mistake(wrong, phrase):
    res = ex.check_n_res_ln(wrong, verbose=False)
    assert not res and res.status == "failed"
    assert any("entries differ from the reference" in m for m in res.messages), res.messages
    assert any(phrase in m for m in res.messages), res.messages


def test_checker_reports_a_wrong_shape_and_an_exception():
    res = ex.check_n_res_ln(lambda *a: solution(*a)[0], verbose=False)
    assert not res and any("expected (5, 5)" in m for m in res.messages), res.messages

    def broken(alpha, fx, x, b_O, ln1):
        return x @ alpha                      # shapes do not fit

    res = ex.check_n_res_ln(broken, verbose=False)
    assert not res and res.status == "failed"
    assert any("raised an exception" in m for m in res.messages), res.messages


def test_the_stub_is_not_attempted(capsys):
    def my_n_res_ln(alpha, fx, x, b_O, ln1):
        # YOUR CODE HERE
        raise NotImplementedError

    res = ex.check_n_res_ln(my_n_res_ln)
    assert not res and res.status == "not attempted"
    assert "not attempted yet" in capsys.readouterr().out
