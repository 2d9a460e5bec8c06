"""Training the models the book analyses, with a disk cache so that each is trained only once.

Three conditions are needed by the papers and cannot be downloaded offline:

* **"Pre-trained" MLM** (Value Zeroing, pre-trained condition): :func:`load_mlm_model`; a
  checkpoint without an MLM head gets one trained on its frozen encoder (:func:`train_mlm_head`).
* **"Fine-tuned" MLM** (Value Zeroing, fine-tuned condition): the paper's prompt fine-tuning on
  BLiMP agreement, :func:`finetune_prompt` / :func:`load_finetuned_mlm`.
* **Sequence classifiers** (GlobEnc, ALTI): :func:`train_classifier` on SST-2, MNLI or HateXplain.

All three run the same loop, :func:`fit` (AdamW, linear schedule with warm-up, seeded batches,
progress, one :class:`Step` per step for :func:`watch_steps`). Every trained model is cached
under ``<cache root>/models/`` by a key that hashes the base model's weights, the training data,
every setting and :data:`CODE_VERSION`, which is derived from the source the weights depend on
(:func:`code_version`), never bumped by hand. Every trainer returns, next to the model, an
``info`` dict (model, data sizes, settings, metrics, wall time, ``from_cache``, cache key) that
:func:`format_info` prints.

Map of the package:

* :mod:`~cmixlib.training.common`: code version, fingerprints, cache keys and files, seeding,
  padding, ``info`` and :func:`format_info`;
* :mod:`~cmixlib.training.loop`: :func:`fit`, the linear schedule, :func:`epoch_batches`,
  :func:`stream_batches`, :func:`watch_steps`;
* :mod:`~cmixlib.training.mlm_scores`: MLM-head logits, :func:`logits_at`, agreement scores;
* :mod:`~cmixlib.training.mlm`: masking, masked-word accuracy, :func:`train_mlm_head`,
  :func:`load_mlm_model`, :func:`mlm_metrics`;
* :mod:`~cmixlib.training.prompt`: :func:`prompt_loss`, :func:`finetune_prompt`,
  :func:`load_finetuned_mlm` (LoRA; committed weights for the packaged MLM);
* :mod:`~cmixlib.training.lora`: the low-rank adapters every committed fine-tune is trained with;
* :mod:`~cmixlib.training.classifiers`: :func:`classification_data`, :func:`train_classifier`,
  :func:`classifier_accuracy`, :func:`keep_encoder_layers`, :func:`label_ids`.
"""
from __future__ import annotations

from cmixlib.cache import CACHE_ENV_VAR, cache_root, stable_hash
from cmixlib.training.classifiers import (CLASSIFIER_TASKS, LABELS, MNLI_DEV_SIZE, MNLI_SPLIT_SEED,
                                          classification_data, classifier_accuracy,
                                          keep_encoder_layers, label_ids, train_classifier)
from cmixlib.training.common import (CODE_VERSION, VERSION_SOURCES, cache_file, cache_key,
                                     code_version, fingerprint_examples, fingerprint_model,
                                     fingerprint_texts, format_info, model_cache_dir, set_seed)
from cmixlib.forward.batching import pad_sequences
from cmixlib.training.loop import (FitResult, Step, epoch_batches, fit, linear_schedule_factor,
                                   make_linear_scheduler, stream_batches, warmup_steps_for,
                                   watch_steps)
from cmixlib.training.mlm import (MLM_MIN_WORDS, default_mlm_texts, load_mlm_model,
                                  masked_word_accuracy, mlm_metrics, static_masking, train_mlm_head)
from cmixlib.training.mlm_scores import (decoder_is_tied, logits_at, mlm_agreement_accuracy,
                                         mlm_agreement_scores, mlm_head_logits,
                                         mlm_head_param_names)
from cmixlib.training.prompt import PROMPT_LR, finetune_prompt, load_finetuned_mlm, prompt_loss

__all__ = [
    "CODE_VERSION", "VERSION_SOURCES", "code_version", "pad_sequences", "cache_root",
    "model_cache_dir", "cache_key", "cache_file", "stable_hash", "fingerprint_texts",
    "fingerprint_examples", "fingerprint_model", "format_info", "linear_schedule_factor",
    "warmup_steps_for", "make_linear_scheduler", "set_seed", "fit", "FitResult", "Step",
    "epoch_batches", "stream_batches", "watch_steps", "mlm_head_logits", "mlm_head_param_names",
    "decoder_is_tied", "logits_at", "static_masking", "masked_word_accuracy", "train_mlm_head",
    "default_mlm_texts", "load_mlm_model", "mlm_metrics", "mlm_agreement_scores",
    "mlm_agreement_accuracy", "PROMPT_LR", "prompt_loss", "finetune_prompt", "load_finetuned_mlm",
    "classification_data", "classifier_accuracy", "train_classifier", "keep_encoder_layers",
    "label_ids", "CLASSIFIER_TASKS", "LABELS", "MNLI_SPLIT_SEED", "MNLI_DEV_SIZE", "MLM_MIN_WORDS",
    "CACHE_ENV_VAR",
]
