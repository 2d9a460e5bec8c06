"""Tests for cmixlib.training: cache keys and reuse, the code version derived from the source, the
one fit loop of all trainers, tied/frozen MLM head, prompt loss, schedule, label ids.

Everything runs on tiny random models with a 40-word tokenizer and a handful of steps. Whether a
call trained is seen through :func:`cmixlib.training.watch_steps` (every step of the fit loop).
"""
from __future__ import annotations

import math
import shutil

import pytest
import torch

from cmixlib import cache as cmix_cache
from cmixlib import random_model
from cmixlib import training as T
from cmixlib.training import common as training_common
from tolerances import rounding_atol

WORDS = ("the a dog dogs cat cats is are was were runs run good bad movie film very not "
         "this that these those man men woman women sees see likes like boring great story plot "
         "actor actors funny sad").split()


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(T.CACHE_ENV_VAR, str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def tok():
    from transformers import BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    return BertTokenizer(vocab={w: i for i, w in enumerate(vocab)})


def _mlm(tok, seed=0):
    return random_model("bert", task="mlm", vocab=len(tok), hidden=16, layers=1, heads=2, seed=seed)


TEXTS = ["the dog runs", "the dogs run very good", "this movie is not good", "the film was boring",
         "these actors are funny", "that man sees the cat", "the women like the story",
         "those cats were sad", "a great plot", "the actor likes this film"] * 3


def _examples(tok, n=24):
    pairs = [("the dog [MASK] good", "is", "are"), ("the dogs [MASK] good", "are", "is"),
             ("the cat [MASK] sad", "was", "were"), ("the cats [MASK] sad", "were", "was")]
    out = []
    for i in range(n):
        text, good, bad = pairs[i % 4]
        ids = tok(text)["input_ids"]
        out.append({"uid": "x", "input_ids": ids, "target_index": ids.index(tok.mask_token_id),
                    "cue_indices": [2], "target_id": tok.convert_tokens_to_ids(good),
                    "foil_id": tok.convert_tokens_to_ids(bad), "label": "singular"})
    return out


def _head(model):
    names = T.mlm_head_param_names(model)
    return {n: p.detach().clone() for n, p in model.named_parameters() if n in names}


# ------------------------------------------------------------------------------- cache keys
def test_cache_key_stable_and_sensitive():
    a = T.cache_key("x", model="m", lr=1e-3, steps=10)
    assert a == T.cache_key("x", steps=10, lr=1e-3, model="m")  # order does not matter
    assert a != T.cache_key("x", model="m", lr=2e-3, steps=10)
    assert a != T.cache_key("x", model="m2", lr=1e-3, steps=10)
    assert a != T.cache_key("y", model="m", lr=1e-3, steps=10)
    assert T.fingerprint_texts(["a", "b"]) != T.fingerprint_texts(["b", "a"])


def test_cache_root_env(tmp_path, monkeypatch):
    monkeypatch.setenv(T.CACHE_ENV_VAR, str(tmp_path / "elsewhere"))
    assert T.model_cache_dir() == tmp_path / "elsewhere" / "models"
    monkeypatch.delenv(T.CACHE_ENV_VAR)
    assert T.model_cache_dir().parts[-2:] == (".cmix_cache", "models")


def test_model_fingerprint_tracks_weights(tok):
    m = _mlm(tok)
    f = T.fingerprint_model(m)
    assert f == T.fingerprint_model(_mlm(tok))
    with torch.no_grad():
        m.bert.encoder.layer[0].output.dense.bias[0] += 1e-3
    assert f != T.fingerprint_model(m)


# ------------------------------------------------------------------------------- MLM head
def test_mlm_head_key_changes_and_cache_reused(tok):
    kw = dict(steps=5, batch_size=8, lr=1e-2, seed=1, progress=False)
    with T.watch_steps() as steps:
        m1, i1 = T.train_mlm_head((_mlm(tok), tok), TEXTS, **kw)
    assert not i1["from_cache"] and i1["data"]["n_texts"] == len(TEXTS) and len(steps) == 5
    head1 = _head(m1)
    # same inputs: loaded from disk, not one training step
    with T.watch_steps() as steps:
        m2, i2 = T.train_mlm_head((_mlm(tok), tok), TEXTS, **kw)
    assert steps == [] and i2["from_cache"] and i2["cache_key"] == i1["cache_key"]
    for n, p in _head(m2).items():
        assert torch.equal(p, head1[n])
    # a changed setting, changed data or another base model retrains
    for bundle, texts, extra in [((_mlm(tok), tok), TEXTS, {"lr": 2e-2}),
                                 ((_mlm(tok), tok), TEXTS[:-1], {}),
                                 ((_mlm(tok, seed=5), tok), TEXTS, {})]:
        with T.watch_steps() as steps:
            _, info = T.train_mlm_head(bundle, texts, **{**kw, **extra})
        assert len(steps) == 5 and not info["from_cache"] and info["cache_key"] != i1["cache_key"]
    # only the head is stored
    blob = torch.load(i1["cache_file"], weights_only=True)
    assert set(blob["state_dict"]) == set(T.mlm_head_param_names(m1))


def test_decoder_tied_to_word_embeddings(tok):
    m, _ = T.train_mlm_head((_mlm(tok), tok), TEXTS, steps=3, batch_size=8, progress=False)
    assert T.decoder_is_tied(m)
    dec, emb = m.get_output_embeddings().weight, m.get_input_embeddings().weight
    assert dec.data_ptr() == emb.data_ptr()
    assert "cls.predictions.decoder.weight" not in T.mlm_head_param_names(m)
    with torch.no_grad():
        emb[7, 0] += 1.0
    assert dec[7, 0] == emb[7, 0]


def test_encoder_frozen_head_trained(tok):
    m0 = _mlm(tok)
    enc_before = {k: v.clone() for k, v in m0.bert.state_dict().items()}
    head_before = _head(m0)
    m, info = T.train_mlm_head((m0, tok), TEXTS, steps=10, batch_size=8, lr=1e-2, progress=False,
                               use_cache=False)
    for k, v in m.bert.state_dict().items():
        assert torch.equal(v, enc_before[k]), k
    changed = [n for n, p in _head(m).items() if not torch.equal(p, head_before[n])]
    assert set(changed) == set(T.mlm_head_param_names(m))
    assert info["settings"]["encoder"] == "frozen"
    assert all(p.requires_grad for p in m.parameters())  # flags restored afterwards
    acc = T.masked_word_accuracy(m, tok, TEXTS[:5])
    assert 0.0 <= acc["accuracy"] <= 1.0 and acc["n_masked"] >= 5


def test_head_training_deterministic(tok):
    kw = dict(steps=4, batch_size=8, seed=3, progress=False, use_cache=False)
    a, _ = T.train_mlm_head((_mlm(tok), tok), TEXTS, **kw)
    b, _ = T.train_mlm_head((_mlm(tok), tok), TEXTS, **kw)
    for n, p in _head(a).items():
        assert torch.equal(p, _head(b)[n])


def test_static_masking_only_non_special():
    out = T.static_masking([[2, 10, 11, 12, 13, 14, 15, 3]], mask_prob=0.15, mask_id=4,
                           special_ids={0, 2, 3}, seed=0)
    masked, pos, orig = out[0]
    assert len(pos) == 1 and pos[0] not in (0, 7) and masked[pos[0]] == 4 and orig == [10 + pos[0] - 1]


# ------------------------------------------------------------------------------- prompt fine-tuning
def test_prompt_loss_only_target_and_foil():
    torch.manual_seed(0)
    logits = torch.randn(3, 20, requires_grad=True)
    t, f = torch.tensor([1, 5, 7]), torch.tensor([2, 6, 1])
    loss = T.prompt_loss(logits, t, f)
    loss.backward()
    g = logits.grad
    keep = torch.zeros_like(g, dtype=torch.bool)
    keep[torch.arange(3), t] = True
    keep[torch.arange(3), f] = True
    assert torch.all(g[~keep] == 0)
    assert torch.all(g[torch.arange(3), t] < 0) and torch.all(g[torch.arange(3), f] > 0)
    two = torch.stack([logits[torch.arange(3), t], logits[torch.arange(3), f]], -1).detach()
    # rule 1: log-sum-exp over 2 logits + 8 (exp and log <= 1 ulp each, the subtractions) + the mean of 3;
    # scale: the mean over the examples of |max - z_t| + ln 2 (bounds each example's nats)
    scale = float((two.max(-1).values - two[:, 0] + math.log(2)).mean())
    torch.testing.assert_close(loss.detach(), -torch.log_softmax(two, -1)[:, 0].mean(), rtol=0,
                               atol=rounding_atol(2 + 8 + 3, scale))


def test_finetune_prompt_trains_copy_and_caches(tok):
    base = _mlm(tok)
    before = T.fingerprint_model(base)
    ex = _examples(tok)
    kw = dict(epochs=10, batch_size=8, lr=1e-2, progress=False, test_examples=ex)
    acc0 = T.mlm_agreement_accuracy(base, ex)
    m, info = T.finetune_prompt(base, ex, **kw)
    assert T.fingerprint_model(base) == before  # the input model is untouched
    assert info["settings"]["total_steps"] == 30 and info["settings"]["warmup_steps"] == 3
    assert info["accuracy"] == T.mlm_agreement_accuracy(m, ex)   # the same function, model and data: exact
    assert info["accuracy"] > max(acc0, 0.5)
    with T.watch_steps() as steps:
        m2, info2 = T.finetune_prompt(base, ex, **kw)
    assert steps == [] and info2["from_cache"] and T.fingerprint_model(m2) == T.fingerprint_model(m)
    with T.watch_steps() as steps:
        _, info3 = T.finetune_prompt(base, ex, **{**kw, "warmup": 0.2})
    assert len(steps) == 30 and not info3["from_cache"]


# ------------------------------------------------------------------------------- schedule
def test_linear_schedule_values():
    f = T.linear_schedule_factor
    assert [f(s, 100, 10) for s in (0, 5, 10, 55, 100, 120)] == [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
    assert f(0, 10, 0) == 1.0 and f(5, 10, 0) == 0.5
    assert T.warmup_steps_for(95, 0.1) == 10 and T.warmup_steps_for(100, 0.1) == 10
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=3e-5)
    sched = T.make_linear_scheduler(opt, 20, 0.1)
    lrs = []
    for _ in range(20):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == 0.0 and math.isclose(lrs[1], 1.5e-5) and math.isclose(lrs[2], 3e-5)
    assert math.isclose(lrs[11], 3e-5 * 9 / 18) and lrs == sorted(lrs[:3]) + lrs[3:]
    assert all(a >= b for a, b in zip(lrs[2:], lrs[3:]))


# ------------------------------------------------------------------------------- classifier
def test_train_classifier_tiny(tok):
    model = random_model("bert", task="sequence-classification", vocab=len(tok), hidden=16, layers=1,
                         heads=2, num_labels=2)
    xs = ["this movie is good", "a great story", "the film was bad", "a boring plot"] * 4
    ys = [1, 1, 0, 0] * 4
    data = {"train": (xs, ys), "dev": (xs[:4], ys[:4]), "train_pool": 16, "description": "toy"}
    kw = dict(epochs=2, batch_size=4, lr=1e-3, progress=False, task_data=data)
    b, info = T.train_classifier("sst2", bundle=(model, tok), **kw)
    assert info["data"]["n_train"] == 16 and info["settings"]["total_steps"] == 8
    assert 0.0 <= info["accuracy"] <= 1.0 and info["train_wall_s"] > 0
    assert "dev_accuracy" in T.format_info(info)
    fresh = random_model("bert", task="sequence-classification", vocab=len(tok), hidden=16, layers=1,
                         heads=2, num_labels=2)
    with T.watch_steps() as steps:
        _, info2 = T.train_classifier("sst2", bundle=(fresh, tok), **kw)
    assert steps == [] and info2["from_cache"]
    assert T.fingerprint_model(fresh) == T.fingerprint_model(b[0])


def test_label_ids():
    assert T.label_ids(["entailment", "contradiction", "neutral"], "mnli") == [0, 2, 1]
    assert T.label_ids(["Normal", " hatespeech", "offensive"], "hatexplain") == [1, 0, 2]
    assert T.label_ids([0, 1, "1"], "sst2") == [0, 1, 1]
    assert T.label_ids(["negative", "positive"], "sst2") == [T.LABELS["sst2"].index("negative"), 1]
    with pytest.raises(ValueError):
        T.label_ids(["maybe"], "sst2")


# ------------------------------------------------------------------------------- the fit loop
def test_every_trainer_runs_the_one_fit_loop(tok):
    """Each trainer's steps are the fit loop's: as many as it reports, under its own name."""
    xs = ["this movie is good", "a great story", "the film was bad", "a boring plot"] * 3
    data = {"train": (xs, [1, 1, 0, 0] * 3), "dev": (xs[:4], [1, 1, 0, 0]), "train_pool": 12,
            "description": "toy"}
    clf = random_model("bert", task="sequence-classification", vocab=len(tok), hidden=16, layers=1,
                       heads=2, num_labels=2)
    with T.watch_steps() as steps:
        _, head = T.train_mlm_head((_mlm(tok), tok), TEXTS, steps=4, batch_size=8, progress=False)
        _, prompt = T.finetune_prompt(_mlm(tok), _examples(tok, 10), epochs=2, batch_size=4,
                                      progress=False)
        _, cls = T.train_classifier("sst2", bundle=(clf, tok), task_data=data, epochs=1,
                                    batch_size=5, progress=False)
    by_name = {}
    for s in steps:
        by_name.setdefault(s.name, []).append(s)
    assert {k: len(v) for k, v in by_name.items()} == {
        "mlm-head": head["settings"]["steps"],
        "prompt fine-tuning": prompt["settings"]["total_steps"],
        "fine-tuning sst2": cls["settings"]["total_steps"]}
    assert [s.step for s in by_name["prompt fine-tuning"]] == list(range(6))
    assert [s.epoch for s in by_name["prompt fine-tuning"]] == [0, 0, 0, 1, 1, 1]
    assert len(prompt["metrics"]["train_loss_per_epoch"]) == 2
    # the recorded lr follows the linear schedule (warm-up 10% of 6 steps = 1 step)
    lrs = [s.lr for s in by_name["prompt fine-tuning"]]
    lr = T.PROMPT_LR
    assert lrs[0] == 0.0 and math.isclose(lrs[1], lr) and math.isclose(lrs[3], lr * 3 / 5)
    assert cls["metrics"]["final_train_loss"] == pytest.approx(
        sum(s.loss for s in by_name["fine-tuning sst2"]) / 3)


def test_fit_on_a_toy_problem():
    """fit minimises the loss over the batches given; epoch means; the batch orders."""
    target = torch.arange(10, dtype=torch.float32)
    w = torch.nn.Parameter(torch.zeros(10))
    run = T.fit([w], lambda b: ((w[b] - target[b]) ** 2).mean(), T.epoch_batches(10, 4, 30, seed=0),
                total_steps=90, lr=0.5, progress=False)
    assert len(run.losses) == 90 and len(run.epoch_losses) == 30
    assert run.epoch_losses[-1] < 1e-2 * run.epoch_losses[0]
    epochs = list(T.epoch_batches(10, 4, 2, seed=0))
    assert [len(b) for _, b in epochs] == [4, 4, 2] * 2
    assert sorted(sum((b for e, b in epochs if e == 1), [])) == list(range(10))
    assert epochs == list(T.epoch_batches(10, 4, 2, seed=0))
    assert epochs != list(T.epoch_batches(10, 4, 2, seed=1))
    stream = list(T.stream_batches(10, 4, 5, seed=0))
    assert [e for e, _ in stream] == [0, 0, 1, 1, 2] and all(len(b) == 4 for _, b in stream)
    assert len(set(torch.cat([stream[0][1], stream[1][1]]).tolist())) == 8



def test_fit_resumed_from_a_checkpoint_takes_the_uninterrupted_steps():
    """A run stopped after step k and resumed (start_step, the optimizer's and schedule's states
    that after_step saw) ends with the very weights of the run that was never stopped; a resume
    without the saved states (Adam moments and schedule at zero) does not."""
    import copy

    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(12, 3, generator=gen), torch.randn(12, 2, generator=gen)
    batches = list(T.epoch_batches(12, 4, 3, seed=1))           # 9 steps
    init = torch.nn.Linear(3, 2)

    def run(parts, states=None, start=0, keep=None):
        model = copy.deepcopy(init) if states is None else states["model"]
        done = []

        def after(step, loss, opt, sched):
            done.append(step)
            if keep is not None and step == keep:
                saved.update(model=copy.deepcopy(model), opt=copy.deepcopy(opt.state_dict()),
                             sched=copy.deepcopy(sched.state_dict()))

        T.fit(model.parameters(), lambda b: ((model(x[b]) - y[b]) ** 2).mean(), parts,
              total_steps=len(batches), lr=0.1, warmup=0.3, progress=False, start_step=start,
              resume=None if states is None or "opt" not in states else states, after_step=after)
        return model, done

    saved: dict = {}
    whole, steps = run(batches)
    assert steps == list(range(1, 10))
    _, first = run(batches[:4], keep=4)
    resumed, rest = run(batches[4:], saved, start=4)
    assert first == [1, 2, 3, 4] and rest == [5, 6, 7, 8, 9]
    for a, b in zip(whole.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    fresh, _ = run(batches[4:], {"model": copy.deepcopy(saved["model"])}, start=4)
    assert not torch.equal(whole.weight, fresh.weight)

# ------------------------------------------------------------------------------- code version
def test_code_version_derived_from_the_training_source(tmp_path, monkeypatch):
    """CODE_VERSION is the hash of the source it names: an edit there (and only there) changes
    it, and with it every cache key, so no version is bumped by hand."""
    assert T.CODE_VERSION == T.code_version() and T.CODE_VERSION.startswith("training-")
    pkg = tmp_path / "cmixlib"
    src = cmix_cache.PACKAGE_DIR
    for name in (*T.VERSION_SOURCES, "plotting/maps.py"):
        if (src / name).is_dir():
            shutil.copytree(src / name, pkg / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (pkg / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src / name, pkg / name)
    monkeypatch.setattr(cmix_cache, "PACKAGE_DIR", pkg)
    assert T.code_version() == T.CODE_VERSION  # an identical copy: the same version
    (pkg / "plotting/maps.py").write_text((pkg / "plotting/maps.py").read_text()
                                          + "\n# not a dependency\n")
    assert T.code_version() == T.CODE_VERSION
    for part in ("training/loop.py", "models/arch/encoders.py", "models/loading.py",
                 "models/hub.py", "models/devices.py", "forward/batching.py"):
        path = pkg / part
        text = path.read_text()
        path.write_text(text + "\n# a comment\n")
        assert T.code_version() == T.CODE_VERSION, part    # comments cannot change a result
        path.write_text(text + "\nAN_EDIT = 1\n")
        assert T.code_version() != T.CODE_VERSION, part
        path.write_text(text)
    assert T.code_version() == T.CODE_VERSION
    key = T.cache_key("x", a=1)
    monkeypatch.setattr(training_common, "CODE_VERSION", "training-other")
    assert T.cache_key("x", a=1) != key
