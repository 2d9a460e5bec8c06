"""The prompt-fine-tuned MLM: LoRA adapters merge exactly, and the committed weights for the
packaged MLM are what the library loads (never retrained in the build), checked by sha256."""
from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
import torch

from cmixlib import random_model, training
from cmixlib.models.classifiers import ClassifierWeightsError, merge_weights
from cmixlib.training import lora
from cmixlib.training import prompt as P
from tolerances import rounding_atol


@pytest.mark.parametrize("family", ["bert", "roberta", "distilbert"])
def test_merged_adapters_equal_the_wrapped_model(family):
    """W + (alpha/r) B A merged into the plain model gives the wrapped model's logits."""
    model = random_model(family, task="mlm", vocab=50, hidden=16, layers=2, heads=2, seed=0)
    model = model.double().eval()
    wrapped = copy.deepcopy(model)
    adapters, full = P.prompt_trainable_names(wrapped)
    assert adapters and all("." in n for n in adapters)
    params = lora.add_lora(wrapped, adapters, full, r=4, alpha=8)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in params.values():
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    merged = copy.deepcopy(model)
    merge_weights(merged, lora.trainable_state(params, torch.float64), 8 / 4)
    ids = torch.randint(5, 50, (2, 7), generator=g)
    with torch.no_grad():
        want, got = wrapped(input_ids=ids).logits, merged(input_ids=ids).logits
    # float64: the merge reorders the sums of each linear map (d_in + r terms); the difference,
    # carried through 2 layers, stays within a generous 1000-term float64 rounding bound, while
    # a wrong merge (scale, transpose) differs by about 1e-2 of the logits
    atol = rounding_atol(1000, float(want.abs().max()), torch.float64)
    torch.testing.assert_close(got, want, rtol=0, atol=atol)
    assert not torch.allclose(merged(input_ids=ids).logits, model(input_ids=ids).logits)


def test_adapters_only_on_linear_layers_of_the_stack():
    model = random_model("bert", task="mlm", vocab=50, hidden=16, layers=2, heads=2)
    adapters, full = P.prompt_trainable_names(model)
    assert len(adapters) == 2 * 6                  # q, k, v, attention output, intermediate, output
    assert not any("word_embeddings" in n for n in full)       # the tied decoder stays frozen
    assert any("LayerNorm" in n for n in full) and any(n.startswith("cls.") for n in full)
    with pytest.raises(ValueError, match="not a torch.nn.Linear"):
        lora.add_lora(model, ["bert.encoder.layer.0.attention"], [], 2, 4)


def test_committed_weights_are_loaded_not_trained(packaged_mlm, tmp_path, monkeypatch):
    """The default call for the packaged MLM matches the committed manifest's recipe identity:
    it loads, takes no training step, and has the manifest's test accuracy (up to the examples
    whose margin is within float32 rounding of 0, whose sign another CPU may flip)."""
    monkeypatch.setenv(training.CACHE_ENV_VAR, str(tmp_path / "cache"))
    man = json.loads((P.COMMITTED_DIR / "manifest.json").read_text())
    with training.watch_steps() as steps:
        bundle, info = training.load_finetuned_mlm(None, pretrained=packaged_mlm,
                                                   progress=False)
    assert steps == [] and info.get("committed") and info["identity"] == man["identity"]
    from cmixlib import data

    test = data.load_blimp_agreement(bundle.tokenizer, split="test", seed=42)
    margin = training.mlm_agreement_scores(bundle.model, test)
    scale = float(np.abs(margin).max())
    ambiguous = int((np.abs(margin) <= rounding_atol(4 * 384, scale)).sum())
    want = man["evaluation"]["agreement_accuracy_test"] * len(test)
    assert abs(float((margin > 0).sum()) - want) <= ambiguous + 1e-9
    assert info["accuracy"] == pytest.approx(float((margin > 0).mean()))


def test_altered_committed_weights_are_refused(tmp_path):
    folder = tmp_path / "prompt"
    shutil.copytree(P.COMMITTED_DIR, folder)
    identity = json.loads((folder / "manifest.json").read_text())["identity"]
    assert P.committed_prompt_state(identity, folder) is not None
    assert P.committed_prompt_state("another identity", folder) is None
    weights = folder / "weights.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0xFF
    weights.write_bytes(bytes(raw))
    with pytest.raises(ClassifierWeightsError):
        P.committed_prompt_state(identity, folder)
