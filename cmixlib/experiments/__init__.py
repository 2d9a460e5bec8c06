"""The papers' experiments, run by name, with results cached on disk.

Each experiment is an :class:`Experiment` declaration: name, title, paper, default settings, the
inputs it reads, its ``compute(ctx) -> {frame_name: DataFrame}`` function (the frame ``"result"``
is required), the papers' numbers with how to compare them, and a summary. :func:`run_experiment`
runs it (or loads it from the cache), writes every frame as CSV next to a JSON metadata sidecar
and returns a :class:`RunResult`.

**What every output states.** ``meta.json`` holds the experiment, the model asked for and the model
actually used (:meth:`cmixlib.ModelBundle.describe`, which names an offline fallback), the data
size, ``limit``, every setting (defaults merged with overrides), the wall time, the code version,
the creation time, free-text notes (e.g. what could not be computed) and the published numbers the
result is compared with (``paper.csv``; quotes from :mod:`cmixlib.data.paper_numbers`, never used in any
computation).

**Cache.** ``<root>/results/<experiment>/<key>/`` where ``<root>`` is ``$CMIX_CACHE`` or
``<repo>/.cmix_cache``. ``key`` hashes (experiment, model name, limit, settings, code version).
The code version (:func:`code_version`) hashes the code of every module of ``cmixlib`` that the
experiment's module imports, transitively (:func:`cmixlib.cache.result_closure`; not the
presentation modules, :data:`PRESENTATION_MODULES`: ``book/``, ``plotting/``, the CLI), and the
committed weights' manifests, so a change to that code, a different model or any changed
setting recomputes, and an edit of a module the experiment does not import does not.

**Your own models or data.** ``run_experiment(name, model="my-model", sources=MySources())``
with a subclass of :class:`Sources` that overrides what it should load (e.g. ``mlm(condition)``,
``classifier(task)``, ``blimp(bundle, limit)``); the tests run every experiment this way on tiny
random models.

Modules: :mod:`~cmixlib.experiments.declaration` (an experiment declared as data, the registry),
:mod:`~cmixlib.experiments.runner` (the run context, the run),
:mod:`~cmixlib.experiments.result_cache` (where results are cached, code version, key),
:mod:`~cmixlib.experiments.spec` (the frozen run spec passed down),
:mod:`~cmixlib.experiments.sources` (models and examples), :mod:`~cmixlib.experiments.common`
(shared batching, target rows, predictions), :mod:`~cmixlib.experiments.saliency` (one
example's maps, for the figures) and the modules of the experiments (statistics of the results:
:mod:`cmixlib.metrics`). Registered experiments, in the order ``cmix list`` shows them (each
compute function's docstring gives the exact recipe):

=============================  ===========================================  ====================  =============
name                           what                                         needs                 module
=============================  ===========================================  ====================  =============
globenc-fig5-ln-outliers       LN#1/LN#2 outlier-gain correlation by layer  model weights only    globenc
alti-fig6-special-ranks        normalised rank of [CLS]/[SEP]/./, (SST-2)   SST-2 classifier*     alti
vz-cue-alignment               dot / AP / probes-needed per layer × method  MLM (+ fine-tuned)*   value_zeroing
vz-distance-ablation           VZ cue alignment with 4 distances, VZ A.1    MLM (+ fine-tuned)*   value_zeroing
vz-mdl-probing                 MDL compression per layer, VZ Table 2        MLM + cue alignment   value_zeroing
vz-faithfulness                Spearman with blank-out, VZ Table 3          MLM (+ fine-tuned)*   value_zeroing
alti-table2                    Spearman with grad-l2 (SST-2), blank-out     classifier*, MLM*     alti
                               (SVA), ALTI Table 2
globenc-correlations           Spearman with G×I saliency per layer,        classifier(s)*        globenc
                               GlobEnc Table 1 / Figure 3 / Table 2
alti-fig7-consistency          Spearman between two models' attributions    2 SST-2 classifiers*  alti
                               (same prediction), ALTI Figure 7             (B: the distilled
                                                                            student offline)
globenc-fig4-hta               Pearson of N-Res/N-ResLN/N-Enc with HTA ×    SST-2 classifier*     globenc
                               input per layer, GlobEnc Figure 4 (99% CI)   (closed-form
                                                                            Jacobian blocks)
alti-fig3-anisotropy           mean pairwise cosine per layer of token      SST-2 classifier*     alti_anisotropy
                               representations, transformed vectors and     (or the encoder)
                               attention-block outputs, ALTI Figure 3
hatexplain-plausibility        plausibility of [CLS] attributions against   HateXplain            plausibility
                               HateXplain's human rationales (ERASER's      classifier*
                               metrics; beyond the papers)
decoder-blimp                  attention sink, causal cue alignment and     SmolLM2 (decoder),    decoder
                               faithfulness of a decoder LM (chapter 16)    BLiMP test half
vz-rollout-depth               Table 3 per layer: single maps, rollouts     MLM (+ fine-tuned)*   vz_rollout
                               with and without I, the open choices
alti-figs8-10-homogeneity      homogeneity of relevance rows per layer,     SST-2 classifier*     alti_layers
                               rollout / norm rollout / ALTI, Figs. 8-10
paper-example-claims           the papers' claims about their example       the book runs'        examples
                               sentences (VZ Table 1, Fig. 4; ALTI Tables   models*
                               1, 3-9; GlobEnc Fig. 1)
=============================  ===========================================  ====================  =============

(*) classifiers: committed for the offline MiniLM and loaded (:func:`cmixlib.load_classifier`,
:func:`cmixlib.load_student`); for another model a public fine-tuned checkpoint where one is
listed (trained only when asked), else trained once by the same recipe and cached. MLMs
(:func:`load_condition_mlm`): committed for the offline MiniLM and loaded, both conditions (the
MLM adaptation of :mod:`cmixlib.models.mlm_adapted` and its prompt fine-tuning); for another
checkpoint the pre-trained condition is its own MLM head where it ships one (else a head trained
on the frozen encoder) and the fine-tuned condition its prompt fine-tuning, trained once by
:mod:`cmixlib.training` and cached. ``--limit`` caps the examples: the first N, or a seeded
sample where the data source says so (:class:`Sources`: BLiMP; ``decoder-blimp``: N per paradigm).
"""
from __future__ import annotations

from cmixlib.cache import CACHE_ENV_VAR  # noqa: F401  (re-exported)
from cmixlib.experiments import (alti, alti_anisotropy, alti_layers, decoder, examples, globenc,
                                 plausibility, value_zeroing, vz_rollout)
from cmixlib.experiments.alti import FIG7_METHODS
from cmixlib.experiments.common import (BATCH_SIZE, GRADIENT_METHODS, IG_STEPS, cls_rows_batch,
                                        comparison_table, mlm_target, padded_batch, target_rows,
                                        target_rows_batch)
from cmixlib.experiments.globenc import FIG4_METHODS, FIG4_VARIANTS, GLOBENC_METHODS
from cmixlib.experiments.declaration import REGISTRY, Experiment, register
from cmixlib.experiments.result_cache import (PRESENTATION_MODULES, cache_key, code_version,
                                              presentation_files, results_root)
from cmixlib.experiments.runner import Context, RunResult, list_experiments, run_experiment
from cmixlib.experiments.sources import (Data, Inputs, Model, ModelByCondition, Sources,
                                         blimp_sample, load_condition_mlm)
from cmixlib.experiments.spec import RunSpec
from cmixlib.experiments.value_zeroing import (VZ_DISTANCE_VARIANTS, VZ_GLOBAL_METHODS,
                                               VZ_LAYER_METHODS, align_key_note)

__all__ = ["Experiment", "Context", "RunSpec", "RunResult", "REGISTRY", "register", "run_experiment",
           "list_experiments", "code_version", "PRESENTATION_MODULES", "presentation_files",
           "results_root", "cache_key", "comparison_table", "Sources", "Model", "ModelByCondition",
           "Data", "Inputs", "load_condition_mlm", "blimp_sample", "padded_batch",
           "target_rows_batch", "target_rows", "cls_rows_batch", "mlm_target", "align_key_note",
           "IG_STEPS", "GRADIENT_METHODS", "BATCH_SIZE", "VZ_LAYER_METHODS", "VZ_GLOBAL_METHODS", "VZ_DISTANCE_VARIANTS", "GLOBENC_METHODS",
           "FIG4_METHODS", "FIG4_VARIANTS", "FIG7_METHODS"]

# Registered in the order of the table above (``cmix list`` shows them in this order).
for _experiment in (globenc.LN_OUTLIERS, alti.FIG6_SPECIAL_RANKS, value_zeroing.CUE_ALIGNMENT,
                    value_zeroing.DISTANCE_ABLATION, value_zeroing.MDL_PROBING,
                    value_zeroing.FAITHFULNESS, alti.TABLE2, globenc.CORRELATIONS,
                    alti.FIG7_CONSISTENCY, globenc.HTA_AGREEMENT, alti_anisotropy.FIG3_ANISOTROPY):
    register(_experiment)
register(plausibility.PLAUSIBILITY)        # beyond the papers
register(decoder.DECODER_BLIMP)            # beyond the papers: a decoder LM (chapter 16)
register(vz_rollout.ROLLOUT_DEPTH)         # beyond the papers: chapter 11's depth analysis
register(alti_layers.FIGS8_10)             # ALTI Figures 8-10 (appendix C)
register(examples.EXAMPLES)                # the papers' example items, by their claims
del _experiment
