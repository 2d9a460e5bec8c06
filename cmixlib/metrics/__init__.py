"""The evaluation metrics: cue alignment, special-token ranks and the MLM's accuracy
(:mod:`cmixlib.metrics.evaluation`), correlations and their statistics
(:mod:`cmixlib.metrics.statistics`), plausibility (:mod:`cmixlib.metrics.plausibility`), the MDL
probe (:mod:`cmixlib.metrics.probing`) and anisotropy (:mod:`cmixlib.metrics.anisotropy`). The
package itself defines nothing: import from its modules."""
