"""blank_out_batch (every sequence of a padded batch and all its erased copies in one forward)
against the obvious reference: for each sequence alone and each position j, re-run the model on
the unpadded sequence with token j replaced and take p(target) over {target, foil} (or the
class probability). Tiny random float64 models, so the tolerance is a few hundred roundings of
u = 1.1e-16 on probabilities <= 1 (1e-12 leaves orders of margin; a wrong row, position or
target gives errors of 1e-3 and more)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib import gradients as G
from cmixlib.gradients.erasure import blank_out_batch

ARCHS = ("bert", "roberta", "electra", "distilbert")
UNK_ID = 6
LENGTHS = (8, 5, 7)
ATOL = 1e-12


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(LENGTHS):
        ids[b, :n] = torch.randint(7, 20, (n,), generator=g)
        ids[b, 0], ids[b, n - 1], mask[b, :n] = 2, 3, 1          # [CLS] ... [SEP]
    return ids, mask


def manual(model, ids, target):
    """(n,) p(x) - p(x with token j -> UNK), one forward per position, no batching, no padding."""
    def p(x):
        with torch.no_grad():
            logits = model(input_ids=x[None]).logits[0]
        if isinstance(target, G.MLMTarget):
            z = logits[target.position]
            return torch.softmax(z[[target.target_id, target.foil_id]], -1)[0].item()
        return torch.softmax(logits, -1)[target.class_index].item()
    out = []
    for j in range(len(ids)):
        x = ids.clone()
        x[j] = UNK_ID
        out.append(p(ids) - p(x))
    return np.array(out)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("batch_size", [None, 4])
def test_mlm_batch_equals_manual_reruns(arch, batch_size):
    model = cmixlib.random_model(arch, task="mlm", dtype=torch.float64, seed=2)
    ids, mask = batch()
    targets = [G.MLMTarget(p, t, 12, score="prob") for p, t in ((3, 10), (1, 11), (5, 13))]
    got = blank_out_batch(model, ids, targets, attention_mask=mask, replacement=UNK_ID,
                          skip_special=False, batch_size=batch_size)
    assert got.shape == ids.shape and got.dtype == np.float64
    for b, (n, t) in enumerate(zip(LENGTHS, targets)):
        want = manual(model, ids[b, :n], t)
        np.testing.assert_allclose(got[b, :n], want, rtol=0, atol=ATOL)
        assert np.all(got[b, n:] == 0)                        # padding
        assert np.abs(want).max() > 1e-4                      # the comparison has something to see
        single = G.blank_out(model, ids[b:b + 1, :n], t, replacement=UNK_ID, skip_special=False)
        np.testing.assert_allclose(got[b, :n], single, rtol=0, atol=ATOL)


def test_skip_special_and_classifier():
    model = cmixlib.random_model("bert", task="sequence-classification", dtype=torch.float64,
                                 seed=3)
    ids, mask = batch(1)
    targets = [G.ClassTarget(c) for c in (0, 1, 1)]
    got = blank_out_batch(model, ids, targets, attention_mask=mask, replacement=UNK_ID)
    for b, (n, t) in enumerate(zip(LENGTHS, targets)):
        want = manual(model, ids[b, :n], t)
        want[[0, n - 1]] = 0.0                                # first/last attended: special
        np.testing.assert_allclose(got[b, :n], want, rtol=0, atol=ATOL)
        assert np.all(got[b, n:] == 0)


def test_mixed_targets_are_refused():
    model = cmixlib.random_model("bert", task="mlm", dtype=torch.float64, seed=2)
    ids, mask = batch()
    targets = [G.MLMTarget(3, 10, 12), G.MLMTarget(1, 10, None), G.MLMTarget(2, 10, 12)]
    with pytest.raises(G.GradientAttributionError, match="one type and score"):
        blank_out_batch(model, ids, targets, attention_mask=mask, replacement=UNK_ID)
    with pytest.raises(G.GradientAttributionError, match="2 target"):
        blank_out_batch(model, ids, targets[:2], attention_mask=mask, replacement=UNK_ID)
