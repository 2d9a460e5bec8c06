"""Generation-time attribution (cmixlib.methods.generation) against its definition: each step's
row equals decoder_context_mixing run on the prefix alone; padded batches equal the prompts
run alone; greedy tokens and step scores against a plain loop."""
import numpy as np
import pytest
import torch

from cmixlib.forward.decoder import random_decoder
from cmixlib.methods.generation import attribute_generation, greedy_continuation
import cmixlib
from cmixlib import AltiLogit
from cmixlib.validation import InputError

METHODS = ["attention", "attention_rollout", "attn_norm", "attn_norm_res", "alti_layer", "alti",
           "value_zeroing", "value_zeroing_rollout", "alti_logit"]
EPS = np.finfo(np.float64).eps


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request):
    return random_decoder(request.param, dtype=torch.float64, seed=3)


def _tol(a: np.ndarray, L: int, n: int) -> np.ndarray:
    """Rounding bound for maps computed from two different-length forward passes: each entry
    is a result of O(L n d) float64 operations on values of magnitude |a| (and the row's
    scale), so 1e3 * L * n * eps relative to the row's largest entry (d = 48 inside 1e3)."""
    scale = np.abs(a).max(axis=-1, keepdims=True) + 1.0
    return 1e3 * L * n * EPS * scale


@torch.no_grad()
def test_each_step_row_equals_the_prefix_run_alone(model):
    prompt = torch.tensor([0, 5, 17, 42, 8])
    res = attribute_generation(model, None, {"input_ids": prompt}, METHODS, max_new_tokens=4)
    gen = torch.as_tensor(res.generated_ids)
    assert res.maps["alti"].shape == (3, 4, 5 + 3)
    for t in range(4):
        prefix = torch.cat([prompt, gen[:t]])
        target = torch.cat([prefix[1:], gen[t:t + 1]])
        ref = cmixlib.context_mixing(model, None, {"input_ids": prefix},
                                     [AltiLogit(target=target) if m == "alti_logit" else m
                                      for m in METHODS])
        p = len(prefix) - 1
        for m in METHODS:
            got = res.maps[m][:, t]
            want = ref[m][:, p]
            assert np.all(got[:, p + 1:] == 0), m            # no source beyond the prefix
            err = np.abs(got[:, : p + 1] - want)
            assert np.all(err <= _tol(want, 3, p + 1)), (m, t, err.max())
            assert np.array_equal(res.step_row(m, t), got[-1, : p + 1])
        logits = model(input_ids=prefix.reshape(1, -1)).logits[0, -1]
        assert int(gen[t]) == int(logits.argmax())                  # greedy
        z = float(logits[gen[t]])
        pr = float(torch.softmax(logits, -1)[gen[t]])
        assert abs(res.logit[t] - z) <= 1e3 * EPS * (abs(z) + 1)
        assert abs(res.probability[t] - pr) <= 1e3 * EPS


@pytest.mark.parametrize("side", ["left", "right"])
@torch.no_grad()
def test_padded_batch_equals_the_prompts_alone(model, side):
    prompts = [[0, 5, 17, 42, 8], [0, 9, 3]]
    width = max(map(len, prompts))
    ids = torch.full((2, width), 7)
    mask = torch.zeros(2, width, dtype=torch.long)
    for b, p in enumerate(prompts):
        sl = slice(width - len(p), width) if side == "left" else slice(0, len(p))
        ids[b, sl], mask[b, sl] = torch.tensor(p), 1
    methods = ["alti", "value_zeroing", "alti_logit"]
    batch = attribute_generation(model, None, {"input_ids": ids, "attention_mask": mask},
                                 methods, max_new_tokens=3)
    assert isinstance(batch, list) and len(batch) == 2
    for p, got in zip(prompts, batch):
        alone = attribute_generation(model, None, {"input_ids": torch.tensor(p)}, methods,
                                     max_new_tokens=3)
        assert got.prompt_ids.tolist() == p
        assert np.array_equal(got.generated_ids, alone.generated_ids)
        for m in methods:      # the same unpadded forward passes: bitwise equal
            assert np.array_equal(got.maps[m], alone.maps[m]), m
        assert np.array_equal(got.logit, alone.logit)


@torch.no_grad()
def test_given_continuation_and_scores(model):
    prompt = torch.tensor([0, 5, 17])
    cont = [11, 12, 13]
    res = attribute_generation(model, None, {"input_ids": prompt}, ["attention"],
                               continuation=cont)
    assert res.generated_ids.tolist() == cont
    full = torch.tensor([0, 5, 17, 11, 12])
    logp = torch.log_softmax(model(input_ids=full.reshape(1, -1)).logits[0, 2:], -1)
    want = logp[torch.arange(3), torch.tensor(cont)].exp().numpy()
    assert np.allclose(res.probability, want, rtol=0, atol=1e3 * EPS)
    frame = res.step_scores()
    assert frame["id"].tolist() == cont and len(frame) == 3
    assert greedy_continuation(model, prompt, 2).shape == (2,)


@torch.no_grad()
def test_bad_arguments_are_refused(model):
    ids = {"input_ids": torch.tensor([0, 1, 2])}
    with pytest.raises(InputError, match="set by attribute_generation"):
        attribute_generation(model, None, ids, ["alti"], rows=[0])
    with pytest.raises(InputError, match="max_new_tokens"):
        attribute_generation(model, None, ids, ["alti"], max_new_tokens=0)
    with pytest.raises(InputError, match="outside the vocabulary"):
        attribute_generation(model, None, ids, ["alti"], continuation=[10 ** 6])
    with pytest.raises(InputError, match="is text"):
        attribute_generation(model, None, ids, ["alti"], continuation="hello")


@torch.no_grad()
def test_generation_figure_and_matrix(model):
    import matplotlib
    matplotlib.use("Agg")
    from cmixlib.plotting.generation import generation_matrix, plot_generation

    res = attribute_generation(model, None, {"input_ids": torch.tensor([0, 5, 17])},
                               ["alti", "alti_logit"], max_new_tokens=3)
    mat = generation_matrix(res, "alti")
    assert mat.shape == (3, 5) and np.isnan(mat[0, 3:]).all() and np.isnan(mat[1, 4])
    assert np.allclose(np.nansum(mat, 1), 1)
    out = generation_matrix(res, "alti", bos_out=True)
    assert out.shape == (3, 4) and np.allclose(np.nansum(out, 1), 1)
    assert np.allclose(out[0, :2], mat[0, 1:3] / mat[0, 1:3].sum())
    raw = generation_matrix(res, "alti_logit", bos_out=True)
    assert np.array_equal(raw[~np.isnan(raw)], res.maps["alti_logit"][-1][:, 1:][~np.isnan(raw)])
    fig = plot_generation(res, bos_out=True)
    assert len([a for a in fig.axes if a.get_title()]) == 2


# ------------------------------------------------------------------ the real model (SmolLM2)
def _needs_smollm2():
    import importlib.util

    from cmixlib.models import smollm2 as sm
    deps = all(importlib.util.find_spec(m) is not None for m in ("gguf", "accelerate"))
    return pytest.mark.skipif(sm.smollm2_gguf_path() is None or not deps,
                              reason="SmolLM2's GGUF or its readers are not installed")


@_needs_smollm2()
@torch.no_grad()
def test_smollm2_text_prompts_padded_ids_and_a_text_continuation():
    """As a user runs it: text prompts (BOS rule), the same prompts as a left-padded tokenizer
    batch (BOS prefixed), a text continuation; step 1's row against the prefix run alone."""
    import cmixlib

    dec = cmixlib.load_model("smollm2", device="cpu")
    prompts = ["The keys to the cabinet", "A dog"]
    methods = ["alti", "alti_logit"]
    by_text = attribute_generation(dec.model, dec.tokenizer, prompts, methods,
                                   max_new_tokens=2)
    enc = [dec.encode_for_decoder(p)["input_ids"][0] for p in prompts]
    width = max(len(e) for e in enc)
    ids = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for b, e in enumerate(enc):
        ids[b, width - len(e):], mask[b, width - len(e):] = e, 1
    by_ids = attribute_generation(dec.model, dec.tokenizer,
                                  {"input_ids": ids, "attention_mask": mask}, methods,
                                  max_new_tokens=2)
    for a, b in zip(by_text, by_ids):
        assert np.array_equal(a.prompt_ids, b.prompt_ids)
        assert np.array_equal(a.generated_ids, b.generated_ids)
        for m in methods:
            assert np.array_equal(a.maps[m], b.maps[m]), m
    given = attribute_generation(dec.model, dec.tokenizer, prompts[0], methods,
                                 continuation=" are on the table")
    want = dec.tokenizer(" are on the table", add_special_tokens=False)["input_ids"]
    assert given.generated_ids.tolist() == want
    assert given.tokens[given.n_prompt:] == dec.tokenizer.convert_ids_to_tokens(want)
    prefix = torch.cat([torch.as_tensor(given.prompt_ids),
                        torch.as_tensor(given.generated_ids[:1])])
    target = torch.cat([prefix[1:], torch.tensor(want[1:2])])
    ref = cmixlib.context_mixing(dec.model, None, {"input_ids": prefix},
                                 [AltiLogit(target=target) if m == "alti_logit" else m
                                  for m in methods])
    for m in methods:      # float32: bound from the row's scale and the model's depth
        got = given.maps[m][:, 1, : len(prefix)]
        err = np.abs(got - ref[m][:, -1]).max()
        scale = np.abs(ref[m]).max() + 1
        assert err <= 1e-4 * scale, (m, err)
