"""cmixlib.load_student: the committed half-depth SST-2 student (ALTI Figure 7's DistilBERT) loads
offline as a plain 3-layer classifier made of the teacher's layers 1, 3, 5, its checksums (and its
teacher's) are verified, its logits are finite and it agrees with the teacher on obvious
sentences. (Its dev accuracy and agreement are measured by benchmarks/bench_classifiers.py.)"""
from __future__ import annotations

import json
import shutil
from functools import lru_cache

import pytest
import torch

import cmixlib
from cmixlib.models import classifiers as cw
from cmixlib.models import student as sw


@lru_cache(maxsize=None)
def loaded():
    """The student and its teacher, loaded once for the whole file."""
    return cmixlib.load_student("sst2"), cmixlib.load_classifier("sst2")


def test_the_student_is_a_plain_three_layer_classifier():
    student, teacher = loaded()
    model, cfg = student.model, student.model.config
    assert type(model).__name__ == "BertForSequenceClassification"
    assert cfg.num_hidden_layers == 3 and len(model.bert.encoder.layer) == 3
    assert teacher.model.config.num_hidden_layers == 6   # pruning copied, never touched the teacher
    assert cfg.id2label == {0: "negative", 1: "positive"}
    assert cfg.label2id == {"negative": 0, "positive": 1}
    assert not model.training and cfg._attn_implementation == "eager"
    assert not any("lora" in n for n, _ in model.named_parameters())
    assert "3 layers" in student.describe()


def test_the_manifest_names_the_kept_teacher_layers_and_the_teacher():
    man = loaded()[0].manifest
    assert man["keep_layers"] == list(sw.KEEP_LAYERS) == [1, 3, 5]
    assert man["teacher"]["sha256"] == cw.read_manifest(cw.ASSET_DIR / "sst2")["sha256"]
    assert man["teacher"]["layers"] == 6 and man["task"] == "sst2"
    assert man["settings"]["lora_r"] == 16 and man["best"]["val_accuracy"] > 0.5
    steps = [c["step"] for c in man["curve"] if "val_accuracy" in c]
    assert steps[0] == 0 and man["best"]["step"] in steps
    assert steps[-1] <= man["steps_done"] <= man["settings"]["total_steps"]


@torch.no_grad()
def test_the_embeddings_are_the_teachers_and_the_layers_start_from_the_kept_ones():
    student, teacher = loaded()
    s, t = student.model.bert, teacher.model.bert
    assert torch.equal(s.embeddings.word_embeddings.weight, t.embeddings.word_embeddings.weight)
    for k, j in enumerate(sw.KEEP_LAYERS):   # adapters are small: each kept weight moved little
        ws = s.encoder.layer[k].attention.self.query.weight
        wt = t.encoder.layer[j].attention.self.query.weight
        assert (ws - wt).norm() < 0.5 * wt.norm()


@torch.no_grad()
def test_logits_are_finite_and_obvious_sentences_agree_with_the_teacher():
    student, teacher = loaded()
    sentences = ["a wonderful , moving film .", "one of the best films of the year , beautifully acted .",
                 "a delightful , funny and warm comedy .", "a dull , tedious and boring mess .",
                 "the worst movie i have seen in years .", "an ugly , pointless and stupid film ."]
    enc = student.tokenizer(sentences, padding=True, return_tensors="pt")
    ls, lt = student.model(**enc).logits, teacher.model(**enc).logits
    assert ls.shape == (len(sentences), 2) and torch.isfinite(ls).all()
    agree = (ls.argmax(-1) == lt.argmax(-1)).float().mean().item()
    assert agree >= 5 / 6
    assert [student.model.config.id2label[int(i)] for i in ls.argmax(-1)][:1] == ["positive"]


def test_a_corrupted_copy_or_another_teacher_raises(tmp_path):
    copy = tmp_path / "sst2-student"
    shutil.copytree(sw.student_dir("sst2"), copy)
    cmixlib.load_student("sst2", folder=copy)            # an intact copy loads
    man = json.loads((copy / "manifest.json").read_text())
    man["teacher"]["sha256"] = {"weights.safetensors": "0" * 64}
    (copy / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(cw.ClassifierWeightsError, match="distilled from"):
        cmixlib.load_student("sst2", folder=copy)
    data = bytearray((copy / "weights.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "weights.safetensors").write_bytes(bytes(data))
    with pytest.raises(cw.ClassifierWeightsError, match="sha256"):
        cmixlib.load_student("sst2", folder=copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(cw.ClassifierWeightsError, match="missing"):
        cmixlib.load_student("sst2", folder=copy)


def test_a_classifier_folder_is_not_a_student():
    with pytest.raises(cw.ClassifierWeightsError, match="student"):
        cmixlib.load_student("sst2", folder=cw.ASSET_DIR / "sst2")


def test_tasks_without_a_student_name_the_allowed_values():
    with pytest.raises(ValueError, match=r"task='mnli'.*sst2"):
        cmixlib.load_student("mnli")
    with pytest.raises(ValueError, match="cola"):
        cmixlib.load_student("cola")


def test_all_committed_classifiers_stay_small_and_checksummed():
    total = 0
    for folder in sorted(p for p in cw.ASSET_DIR.iterdir() if p.is_dir()):
        for name, digest in cw.read_manifest(folder)["sha256"].items():
            assert cw.sha256_file(folder / name) == digest
            total += (folder / name).stat().st_size
    assert total <= 20 * 2**20


def test_prune_layers_keeps_the_named_layers_of_a_copy():
    model = cmixlib.random_model("bert", layers=4)
    pruned = sw.prune_layers(model, [1, 3])
    assert pruned.config.num_hidden_layers == 2 and model.config.num_hidden_layers == 4
    assert torch.equal(pruned.base_model.encoder.layer[1].output.dense.weight,
                       model.base_model.encoder.layer[3].output.dense.weight)
    with pytest.raises(ValueError, match="keep"):
        sw.prune_layers(model, [4])
