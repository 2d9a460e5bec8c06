"""The explanatory diagrams of cmixlib.plotting.diagrams (Agg backend, nothing is displayed),
and the public names of cmixlib.plotting, which became a package (maps + diagrams)."""
import importlib

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from cmixlib import plotting
from cmixlib.methods import registry  # noqa: E402
from cmixlib.plotting import LAYER_READS, draw_encoder_layer, draw_rollout, draw_value_zeroing

#: every name that notebooks, tests and the book import from cmixlib.plotting
OLD_PUBLIC = ["DIV_CMAP", "METHOD_COLORS", "METHOD_LABELS", "SEQ_CMAP", "colour_tokens_html",
              "method_color", "method_label", "plot_alignment_heatmap", "plot_consistency_bars",
              "plot_layer_correlations", "plot_layer_maps", "plot_layer_rows", "plot_map",
              "plot_method_lines", "plot_row", "saliency_table_html"]


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _texts(fig: Figure) -> list[str]:
    out = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    return [t for t in out if t]


def test_old_public_names_still_import():
    for name in OLD_PUBLIC:
        assert hasattr(plotting, name), name
        assert name in plotting.__all__, name
        exec(f"from cmixlib.plotting import {name}", {})  # noqa: S102
    maps = importlib.import_module("cmixlib.plotting.maps")
    assert plotting.plot_map is maps.plot_map
    assert plotting.METHOD_LABELS is registry.METHOD_LABELS
    assert plotting.method_label("alti") == registry.method_label("alti")


def test_encoder_layer_marks_every_reading_place():
    fig = draw_encoder_layer()
    assert isinstance(fig, Figure)
    texts = _texts(fig)
    joined = "\n".join(texts)
    names = [name for _, name, _ in LAYER_READS]
    assert {"attention", "attention_rollout", "attn_norm", "attn_norm_res", "attn_norm_res_ln",
            "alti_layer", "globenc_layer", "globenc", "value_zeroing"} <= set(names)
    for name in names:    # one tag per method, with the registry's label, exactly
        assert registry.method_label(name) in texts, name
    for step in ("LN1", "LN2", "FFN", "residual", r"f^h(x_j)", r"\alpha^h_{ij}", "y_i", "o_i"):
        assert step in joined, step
    # the tags carry the registry colours
    colours = {matplotlib.colors.to_hex(t.get_bbox_patch().get_facecolor())
               for t in fig.findobj(matplotlib.text.Text)
               if t.get_text() in {registry.method_label(n) for n in names}}
    assert {registry.method_color(n) for n in names} <= colours


def test_encoder_layer_draws_into_a_given_axes():
    fig, ax = plt.subplots()
    assert draw_encoder_layer(ax) is fig


def test_rollout_both_modes_and_one():
    fig = draw_rollout()
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    joined = "\n".join(_texts(fig))
    for label in (registry.method_label("attention_rollout"), registry.method_label("globenc"),
                  r"\hat C^{\ell} = \tilde C^{\ell}\,\hat C^{\ell-1}", "(C^{\\ell} + I)/2",
                  "no $I$", "[CLS]", "keys"):
        assert label in joined, label
    one = draw_rollout(np.full((2, 3, 3), 1 / 3), ["a", "b", "c"], add_identity=False)
    assert len(one.axes) == 1
    texts = "\n".join(_texts(one))
    assert registry.method_label("globenc") in texts
    assert registry.method_label("attention_rollout") not in texts


def test_rollout_rejects_bad_maps():
    with pytest.raises(ValueError, match="non-negative"):
        draw_rollout(np.ones((3, 3)))
    with pytest.raises(ValueError, match="one per row"):
        draw_rollout(np.ones((2, 3, 3)), ["a", "b"])


def test_value_zeroing_perturbation():
    fig = draw_value_zeroing(["[CLS]", "a", "b", "[SEP]"], j=1)
    assert isinstance(fig, Figure)
    texts = _texts(fig)
    joined = "\n".join(texts)
    assert registry.method_label("value_zeroing") in joined
    for piece in (r"v^h_j \leftarrow 0", r"o^{\neg j}_{1}", r"o_{4}", r"C_{ij}",
                  r"\mathrm{dist}", "LN2", "column $j$", "token $j$ = a"):
        assert piece in joined, piece
    with pytest.raises(ValueError, match="token index"):
        draw_value_zeroing(["a", "b"], j=5)
