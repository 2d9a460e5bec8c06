"""cmixlib.load_classifier: the committed classifier weights load offline, their checksums are
verified, the labels are the datasets', obvious SST-2 sentences are classified right, and MNLI's
held-out evaluation rows were never trained on. (Accuracies are measured by
benchmarks/bench_classifiers.py, not here.)"""
from __future__ import annotations

import shutil
from functools import lru_cache

import pytest
import torch

import cmixlib
from cmixlib.models import classifiers as cw
from cmixlib.training import LABELS


@lru_cache(maxsize=None)
def loaded(task: str):
    """Each committed classifier is loaded once for the whole file."""
    return cmixlib.load_classifier(task)


@pytest.fixture(scope="module")
def sst2():
    return loaded("sst2")


@pytest.mark.parametrize("task", cw.TASKS)
def test_committed_weights_load_offline_with_the_datasets_labels(task):
    bundle = loaded(task)
    cfg = bundle.model.config
    assert [cfg.id2label[i] for i in range(len(LABELS[task]))] == LABELS[task]
    assert cfg.label2id == {lab: i for i, lab in enumerate(LABELS[task])}
    assert not bundle.model.training
    assert cfg._attn_implementation == "eager"
    assert bundle.manifest["task"] == task and bundle.head_is_pretrained
    assert not any("initialised randomly" in n for n in bundle.notes)
    assert sum(p.numel() for p in bundle.model.parameters()) > 20_000_000   # the whole MiniLM


def test_committed_assets_are_small_and_checksummed():
    total = 0
    for task in cw.TASKS:
        man = cw.read_manifest(cw.ASSET_DIR / task)
        for name, digest in man["sha256"].items():
            assert cw.sha256_file(cw.ASSET_DIR / task / name) == digest
            total += (cw.ASSET_DIR / task / name).stat().st_size
    assert total <= 20 * 2**20


def test_a_corrupted_copy_raises(tmp_path):
    copy = tmp_path / "sst2"
    shutil.copytree(cw.ASSET_DIR / "sst2", copy)
    cmixlib.load_classifier("sst2", folder=copy)          # an intact copy loads
    data = bytearray((copy / "weights.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "weights.safetensors").write_bytes(bytes(data))
    with pytest.raises(cw.ClassifierWeightsError, match="sha256"):
        cmixlib.load_classifier("sst2", folder=copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(cw.ClassifierWeightsError, match="missing"):
        cmixlib.load_classifier("sst2", folder=copy)


def test_weights_of_another_task_are_refused():
    with pytest.raises(cw.ClassifierWeightsError, match="sst2"):
        cmixlib.load_classifier("hatexplain", folder=cw.ASSET_DIR / "sst2")


def test_unknown_task_names_task_and_the_allowed_values():
    with pytest.raises(ValueError, match=r"task='cola'.*sst2, mnli, hatexplain"):
        cmixlib.load_classifier("cola")
    assert cw.check_task("SST-2") == "sst2"


@torch.no_grad()
def test_obvious_sst2_sentences(sst2):
    sentences = {"a wonderful , moving film .": "positive",
                 "one of the best films of the year , beautifully acted .": "positive",
                 "a delightful and charming comedy .": "positive",
                 "a dull , boring mess .": "negative",
                 "the worst movie i have ever seen .": "negative",
                 "tedious , clumsy and completely pointless .": "negative"}
    enc = sst2.tokenizer(list(sentences), padding=True, return_tensors="pt")
    pred = sst2.model(**enc).logits.argmax(-1).tolist()
    assert [sst2.model.config.id2label[p] for p in pred] == list(sentences.values())


def test_mnli_heldout_rows_are_disjoint_from_training():
    held = loaded("mnli").heldout_indices
    assert held == sorted(set(held)) and len(held) == cw.MNLI_HELDOUT
    d = cw.task_splits("mnli")
    rows = cmixlib.data.load_mnli()
    held_pairs = {(rows["premise"][i].strip(), rows["hypothesis"][i].strip()) for i in held}
    used = {(a.strip(), b.strip()) for a, b in d["train"][0] + d["val"][0]}
    assert not held_pairs & used
    assert len(d["eval"][0]) == len(held)
    # the book's 2,000-row MNLI "dev" part (training.classification_data) is inside the held-out rows
    book_dev = set(cmixlib.training.classification_data("mnli")["dev"][0])
    assert book_dev <= {(rows["premise"][i], rows["hypothesis"][i]) for i in held}


def test_sst2_and_hatexplain_evaluate_whole_splits():
    for task in ("sst2", "hatexplain"):
        assert cw.read_manifest(cw.ASSET_DIR / task).get("heldout_indices") is None


def test_a_named_model_is_trained_once_by_the_recipe_then_loaded_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path))
    calls = []

    def fake_recipe(task, name, out):           # stands in for hours of training
        calls.append((task, name, out))
        shutil.copytree(cw.ASSET_DIR / task, out)

    monkeypatch.setattr(cw, "_train_with_recipe", fake_recipe)
    name = str(cmixlib.packaged_model_path())
    first = cmixlib.load_classifier("sst2", name)
    second = cmixlib.load_classifier("sst2", name)
    assert len(calls) == 1 and calls[0][2] == cw.trained_dir("sst2", name)
    assert str(calls[0][2]).startswith(str(tmp_path))
    assert first.model.config.id2label == second.model.config.id2label == {0: "negative", 1: "positive"}


# ---------------------------------------------------------------------------------------------
# The experiments read these classifiers (cmixlib.experiments.Sources)
# ---------------------------------------------------------------------------------------------
def _spec(experiment: str, **settings):
    from cmixlib.experiments import REGISTRY, RunSpec

    return RunSpec(experiment, "bert-base-uncased", None, {**REGISTRY[experiment].defaults, **settings})


def test_an_unloadable_name_falls_back_to_the_committed_classifier():
    name = "no-such-org/no-such-model-for-cmixlib-tests"
    with pytest.warns(UserWarning, match="not available"):
        b = cmixlib.load_classifier("sst2", name)
    assert b.is_fallback and b.requested == name and b.name == cmixlib.models.loading.FALLBACK_NAME
    assert "offline fallback" in b.describe() and "committed weights" in b.describe()
    with pytest.raises(cmixlib.ModelLoadError):
        cmixlib.load_classifier("sst2", name, allow_fallback=False)


def test_the_experiments_read_the_committed_classifiers_by_default():
    from cmixlib.experiments import Sources

    sources = Sources().bind(_spec("globenc-correlations"))
    with pytest.warns(UserWarning):             # bert-base-uncased is not here: the offline model
        bundle, info = sources.classifier("mnli")
    assert info["accuracy"] == bundle.manifest["evaluation"]["accuracy"] and info["accuracy_n"] == 4000
    rows = sources.classification_inputs(bundle, "mnli", None)   # the rows it never saw
    xs, ys = cw.task_splits("mnli")["eval"]
    assert len(rows) == len(xs) == 4000 and [r["label"] for r in rows] == list(ys)
    enc = bundle.tokenizer(*xs[7])["input_ids"]
    assert rows[7]["input_ids"] == enc[:512] and rows[7]["target_index"] == 0


def test_model_b_of_the_committed_classifier_is_the_distilled_student():
    from cmixlib.experiments import Sources

    sources = Sources().bind(_spec("alti-fig7-consistency"))
    b, info, how = sources.model_b(loaded("sst2"))
    assert b.model.config.num_hidden_layers == 3 and "distilled student" in how
    assert info["accuracy"] == b.manifest["evaluation"]["accuracy"]
    # quick-mode settings (a brief fine-tune of A) never read the committed student
    quick = Sources().bind(_spec("alti-fig7-consistency", cls_max_train_examples=8))
    calls = []
    quick.train_classifier = lambda task, model, **kw: calls.append(kw) or (loaded("sst2"), {})
    quick.model_b(loaded("sst2"))
    assert calls and calls[0]["keep_layers"] == [1, 3, 5]
