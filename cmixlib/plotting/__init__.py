"""Plotting helpers shared by every chapter of the book.

Colours and labels come from the one registry (:mod:`cmixlib.methods.registry`: :func:`method_color`,
:func:`method_label`, re-exported here), so a method looks the same in every figure.

* :mod:`cmixlib.plotting.maps` -- figures of computed results: context-mixing maps as heatmaps
  (:func:`plot_map`, :func:`plot_layer_maps`), rows of maps (:func:`plot_layer_rows`,
  :func:`plot_row`), shaded sentences (:func:`colour_tokens_html`), tables of scores
  (:func:`plot_alignment_heatmap`, :func:`plot_method_lines`,
  :func:`plot_layer_correlations`);
* :mod:`cmixlib.plotting.bars` -- one bar per method: :func:`plot_consistency_bars`, the paper
  beside ours (:func:`plot_paper_vs_ours`), confidence intervals of means (:func:`mean_interval`);
* :mod:`cmixlib.plotting.result_views` -- a user's own results (:class:`cmixlib.MixingResult`):
  :func:`plot_result` (what ``res.plot()`` draws) and :func:`results_html` (the explorer on
  one's own sentences, what ``res.to_html()`` returns, for one result or a batch);
* :mod:`cmixlib.plotting.diagrams` -- explanatory diagrams drawn from no data: where each method
  reads in a post-LN encoder layer (:func:`draw_encoder_layer`), rollout across layers
  (:func:`draw_rollout`) and Value Zeroing's perturbation (:func:`draw_value_zeroing`).

The figure functions return matplotlib objects and never call ``plt.show()``.
"""
from __future__ import annotations

from cmixlib.plotting.diagrams import (LAYER_READS, draw_encoder_layer, draw_rollout,
                                       draw_value_zeroing)
from cmixlib.plotting.bars import mean_interval, plot_consistency_bars, plot_paper_vs_ours
from cmixlib.plotting.maps import (DIV_CMAP, METHOD_COLORS, METHOD_LABELS, SEQ_CMAP,
                                   colour_tokens_html, method_color, method_label,
                                   plot_alignment_heatmap, plot_layer_correlations, plot_layer_maps,
                                   plot_layer_rows, plot_map, plot_method_lines, plot_row,
                                   saliency_table_html)
from cmixlib.plotting.result_views import plot_result, results_html

__all__ = ["DIV_CMAP", "METHOD_COLORS", "METHOD_LABELS", "SEQ_CMAP", "colour_tokens_html",
           "mean_interval", "method_color", "method_label", "plot_alignment_heatmap",
           "plot_consistency_bars", "plot_paper_vs_ours",
           "plot_layer_correlations", "plot_layer_maps", "plot_layer_rows", "plot_map",
           "plot_method_lines", "plot_row", "saliency_table_html",
           "LAYER_READS", "draw_encoder_layer", "draw_rollout", "draw_value_zeroing",
           "plot_result", "results_html"]
