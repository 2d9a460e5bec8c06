"""cmixlib.book.identity: a run's model identity, from meta["model_identity"] when the run stored
it, else derived from the display text of an older build (ModelBundle.describe's line)."""
from types import SimpleNamespace

import pytest

import cmixlib
from cmixlib.book import identity as I
from cmixlib.book.claims import runs as CR
from cmixlib.book.claims.rules_alti import _layers_of
from cmixlib.book.decoder_report import short_name


def _bundle(**kw):
    return cmixlib.ModelBundle(model=cmixlib.random_model("bert"), tokenizer=None,
                               requested=kw.pop("requested", "random"), source="random",
                               name=kw.pop("name", "random BERT"), **kw)


def test_the_describe_line_of_a_bundle_parses_back_to_its_fields():
    cfg = cmixlib.random_model("bert").config
    for kw in ({}, {"variant": "fine-tuned on sst2; 3 epochs (a: b)"},
               {"is_fallback": True, "requested": "bert-base-uncased", "name": "org/m"},
               {"is_fallback": True, "requested": "bert-base-uncased", "variant": "x: y"}):
        b = _bundle(**kw)
        (got,) = I.parse_model_text(b.describe())
        assert got["id"] == b.name and got["family"] == cfg.model_type
        assert got["layers"] == cfg.num_hidden_layers and got["hidden"] == cfg.hidden_size
        assert got["variant"] == b.variant and got["fallback"] == b.is_fallback
        assert got["requested"] == (b.requested if b.is_fallback else None)
        assert got["task"] is None and got["key"] is None and got["accuracy"] is None
        if hasattr(b, "identity"):       # the structured identity, where the bundle has it
            want = b.identity()
            for k in ("family", "layers", "hidden", "variant", "fallback"):
                assert got[k] == want[k], k


def test_a_run_of_several_models_parses_per_part_with_its_key_and_accuracy():
    a = _bundle(name="A-model", is_fallback=True, requested="bert-base-uncased").describe()
    b = _bundle(name="B-model", variant="distilled").describe()
    meta = {"model": f"A: {a}; accuracy 0.516 | B: {b}; accuracy 0.500"}
    ids = I.model_identities(meta)
    assert [i["key"] for i in ids] == ["A", "B"] and I.model_ids(meta) == ["A-model", "B-model"]
    assert [i["fallback"] for i in ids] == [True, False] and I.is_fallback(meta)
    assert ids[1]["variant"] == "distilled" and ids[0]["requested"] == "bert-base-uncased"
    assert I.stated_accuracies(meta) == [("A", 0.516), ("B", 0.5)]
    assert CR.accuracies(meta) == "A 0.516, B 0.500"
    with pytest.raises(ValueError, match="model_identities"):
        I.model_identity(meta)


def test_a_stored_identity_wins_over_the_display_text():
    ident = {"id": "bert-base-uncased", "requested": "bert-base-uncased", "family": "bert",
             "layers": 12, "hidden": 768, "task": "mlm", "variant": None, "fallback": False}
    text = "bert-base-uncased (bert, 12 layers, hidden 768)"
    res = SimpleNamespace(meta={"model": text, "model_identity": ident})
    assert I.model_identity(res.meta) == {**ident, "key": None}
    assert CR.same_model(res) and _layers_of(res) == 12 and short_name(res.meta) == ident["id"]
    # the verdict follows the stored flag, not the text
    res.meta["model_identity"] = {**ident, "fallback": True, "id": "all-MiniLM-L6-v2"}
    assert not CR.same_model(res) and short_name(res.meta) == "all-MiniLM-L6-v2"
    # several models: a list in the parts' order, or {key: identity}
    two = {"model": f"A: {text} | B: distilbert-base-uncased (distilbert, 6 layers, hidden 768)",
           "model_identity": [{**ident, "key": "A"},
                              {**ident, "key": "B", "id": "distilbert-base-uncased",
                               "family": "distilbert", "layers": 6}]}
    fig7 = SimpleNamespace(meta=two)
    assert CR.same_model(fig7, (CR.MAIN_MODEL, "distilbert-base-uncased"))
    assert not CR.same_model(fig7)
    as_dict = dict(two, model_identity={i["key"]: i for i in two["model_identity"]})
    assert I.model_identities(as_dict) == I.model_identities(two)
    with pytest.raises(ValueError, match="one identity per model"):
        I.model_identities(dict(two, model_identity=ident))
    assert CR.short_models(I.model_identities(two)) == \
        "A: bert-base-uncased | B: distilbert-base-uncased"


@pytest.mark.slow
def test_the_meta_of_a_real_run_gives_its_model(tmp_path, monkeypatch):
    from cmixlib.experiments import run_experiment

    monkeypatch.setenv("CMIX_CACHE", str(tmp_path))
    monkeypatch.setenv("CMIX_DEVICE", "cpu")
    bundle = cmixlib.load_model()
    res = run_experiment("globenc-fig5-ln-outliers", progress=False)
    got = I.model_identity(res.meta)
    cfg = bundle.model.config
    assert got["id"] == bundle.name and got["fallback"] == bundle.is_fallback
    assert (got["family"], got["layers"], got["hidden"]) == (
        cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size)
    assert CR.same_model(res) == (not bundle.is_fallback and bundle.name == CR.MAIN_MODEL)


def test_a_run_stores_the_identity_it_describes():
    """Context.describe_models writes meta["model"] and meta["model_identity"] together; the
    stored identity agrees with what the display text says, a hand-written description drops
    it (the book then parses the text), and a run of several models keeps their keys."""
    import cmixlib
    from cmixlib.book.identity import model_identities, parse_model_text
    from cmixlib.experiments.runner import Context, _identities

    bundle = cmixlib.ModelBundle(model=cmixlib.random_model("bert"), tokenizer=None,
                                 requested="bert-base-uncased", source="x", name="tiny BERT",
                                 is_fallback=True)
    ctx = Context("identity-probe", "bert-base-uncased", None, {})
    ctx.describe_models([(None, bundle, {"accuracy": 0.5})])
    info = dict(ctx.info)
    meta = {"model": info["model_description"], "model_identity": _identities(info)}
    stored, parsed = model_identities(meta)[0], parse_model_text(meta["model"])[0]
    assert stored["family"] == "bert" and stored["fallback"] is True
    for k in ("id", "family", "layers", "hidden", "fallback", "requested"):
        assert stored[k] == parsed[k], k
    ctx.describe_models([("A", bundle, None), ("B", bundle, None)])
    ids = _identities(dict(ctx.info))
    assert [i["key"] for i in ids] == ["A", "B"]
    ctx.info["model_description"] = "written by hand"
    assert _identities(dict(ctx.info)) is None
