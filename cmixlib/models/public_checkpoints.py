"""Public fine-tuned checkpoints of the papers' classifiers, as their Hub pages state them.

:func:`cmixlib.load_classifier` loads the checkpoint of :data:`PUBLIC_CHECKPOINTS` for a
``(task, base model)`` where it loads (the Hub reachable, or in the Hugging Face cache), its
classes reordered to ours (:func:`cmixlib.models.classifiers.load_public`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublicCheckpoint:
    """A public fine-tuned checkpoint for ``task`` on base model ``base``, as its Hub pages state
    them (read through a search index of stored pages: the Hub itself could not be reached from
    this build). ``label_names``: our labels in the checkpoint's class order where a source states
    it, else None (then :func:`cmixlib.load_classifier` establishes the order by
    measuring, see :func:`cmixlib.models.classifiers.label_order`). ``unverified``: what could not be checked against a source."""

    task: str
    base: str
    id: str
    revision: str | None
    licence: str | None
    label_names: tuple[str, ...] | None
    card_accuracy: float | None
    accuracy_split: str | None
    sources: tuple[str, ...]
    unverified: tuple[str, ...] = ()


#: Public fine-tuned checkpoints by ``(task, base model)``. The papers' classifiers are BERT-base
#: (bert-base-uncased) fine-tuned per task; ALTI Figure 7's second model is DistilBERT's SST-2.
PUBLIC_CHECKPOINTS: dict[tuple[str, str], PublicCheckpoint] = {(c.task, c.base): c for c in (
    PublicCheckpoint(
        "sst2", "bert-base-uncased", "textattack/bert-base-uncased-SST-2",
        "38de35daf69cc69359cd1389a0bccb67e0a964cd", None, None, 0.9243119266055045,
        "eval set (eval_results_sst-2.txt: eval_acc, epoch 3.0)",
        ("https://huggingface.co/textattack/bert-base-uncased-SST-2/blob/"
         "38de35daf69cc69359cd1389a0bccb67e0a964cd/eval_results_sst-2.txt",),
        ("licence (none found)", "label order (config not seen)", "revision of the weights "
         "(the revision is that of eval_results_sst-2.txt)")),
    PublicCheckpoint(
        "mnli", "bert-base-uncased", "textattack/bert-base-uncased-MNLI",
        "ac99b3eed0b81199599c15f9919f4cb6ffa2ea70", None, None, None, None,
        ("https://huggingface.co/textattack/bert-base-uncased-MNLI/commits/"
         "ac99b3eed0b81199599c15f9919f4cb6ffa2ea70",),
        ("licence (none found)", "accuracy (no model card or eval file found)",
         "label order (config not seen; TextAttack's own NLI wrappers remap outputs, e.g. "
         "[1, 2, 0] for SNLI)")),
    PublicCheckpoint(
        "hatexplain", "bert-base-uncased", "Hate-speech-CNERG/bert-base-uncased-hatexplain",
        "0b1f0b7931c48f43b0c6c01b77a2812d9138ddaa", "apache-2.0", None, None, None,
        ("https://huggingface.co/Hate-speech-CNERG/bert-base-uncased-hatexplain",
         "https://huggingface.co/Hate-speech-CNERG/bert-base-uncased-hatexplain/commits/"
         "0b1f0b7931c48f43b0c6c01b77a2812d9138ddaa"),
        ("accuracy (the card states none)", "label order (config not seen)",
         "its tokenizer_config.json sets do_lower_case false (a cased tokenizer over an "
         "uncased vocabulary)")),
    PublicCheckpoint(
        "sst2", "distilbert-base-uncased",
        "distilbert/distilbert-base-uncased-finetuned-sst-2-english",
        "1f4bc97efbebc9ebd075e3bf19ca9801601c0670", "apache-2.0", ("negative", "positive"),
        0.9105504587155964, "GLUE sst2 validation (model-index, verified: true)",
        ("https://huggingface.co/distilbert/distilbert-base-uncased-finetuned-sst-2-english/blob/"
         "1f4bc97efbebc9ebd075e3bf19ca9801601c0670/README.md",),
        ("label order NEGATIVE, POSITIVE seen only in configs of checkpoints derived from it; "
         "the card's text says 91.3 on the dev set",)),
)}
