"""The shared plotting helpers on fake data (Agg backend, nothing is displayed)."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from cmixlib import plotting  # noqa: E402

BOOK_METHODS = [
    "attention", "attention_rollout", "attention_flow", "attn_norm", "attn_norm_res",
    "attn_norm_res_ln", "globenc_layer", "globenc", "w_fixedres", "n_fixedres", "w_res",
    "alti_layer", "alti", "value_zeroing", "value_zeroing_rollout",
    "grad_l2", "grad_x_input_l2", "grad_x_input_abs", "integrated_gradients", "deeplift",
    "blank_out", "random",
]
TOKENS = ["[CLS]", "the", "keys", "to", "the", "cabinet", "are", "[SEP]"]


def _maps(layers=3, n=len(TOKENS), seed=0):
    rng = np.random.default_rng(seed)
    m = rng.random((layers, n, n))
    return m / m.sum(-1, keepdims=True)


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_every_method_has_a_distinct_colour_and_a_label():
    for name in BOOK_METHODS:
        assert name in plotting.METHOD_COLORS, name
        assert name in plotting.METHOD_LABELS, name
        assert matplotlib.colors.is_color_like(plotting.METHOD_COLORS[name])
    colours = [plotting.METHOD_COLORS[m] for m in BOOK_METHODS]
    assert len(set(colours)) == len(colours)
    assert plotting.METHOD_LABELS["attn_norm_res_ln"] == "N-ResLN"
    assert plotting.METHOD_LABELS["globenc"] == "GlobEnc"
    assert plotting.METHOD_LABELS["alti"] == "ALTI"
    assert plotting.METHOD_LABELS["value_zeroing"] == "Value Zeroing"
    assert plotting.method_color("unknown") == "#7f7f7f"
    assert plotting.method_label("unknown") == "unknown"


def test_registry_methods_are_covered():
    import cmixlib

    registry = getattr(cmixlib, "METHODS", None)
    if registry is None:
        pytest.skip("cmixlib.METHODS not available yet")
    missing = [name for name in registry if name not in plotting.METHOD_COLORS]
    assert not missing, f"methods without a colour: {missing}"


def test_plot_map_labels_and_values():
    m = _maps()[0]
    ax = plotting.plot_map(m, TOKENS, title="attention, layer 1")
    assert ax.get_title() == "attention, layer 1"
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
    assert len(ax.texts) == len(TOKENS) ** 2  # annotated (n <= 12)
    np.testing.assert_allclose(ax.images[0].get_array(), m)


def test_plot_map_signed_uses_centered_scale_and_torch_input():
    torch = pytest.importorskip("torch")
    m = torch.randn(5, 5)
    ax = plotting.plot_map(m, TOKENS[:5], annotate=False)
    lo, hi = ax.images[0].get_clim()
    assert lo == pytest.approx(-hi)
    assert not ax.texts


def test_plot_map_rejects_3d():
    with pytest.raises(ValueError):
        plotting.plot_map(_maps(), TOKENS)


def test_plot_layer_maps_grid():
    maps = _maps(layers=6)
    fig = plotting.plot_layer_maps(maps, TOKENS, ncols=4, title="rollout", shared_scale=True)
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    visible = [ax for ax in fig.axes if ax.get_visible() and ax.axison and ax not in bars]
    assert len(visible) == 6
    assert [ax.get_title() for ax in visible] == [f"layer {i}" for i in range(1, 7)]
    clims = {ax.images[0].get_clim() for ax in visible}
    assert len(clims) == 1
    assert len(bars) == 1                                # one colour bar for the shared scale
    assert fig.get_supxlabel() == "contributing token j"
    assert fig.get_supylabel() == "receiving token i"
    fig2 = plotting.plot_layer_maps(maps, TOKENS, layers=[0, 5])
    bars2 = [ax for ax in fig2.axes if ax.get_label() == "<colorbar>"]
    assert [ax.get_title() for ax in fig2.axes if ax.axison and ax not in bars2] == \
        ["layer 1", "layer 6"]
    assert len(bars2) == 2                               # one per panel on its own scale


def test_plot_row_and_highlight():
    scores = _maps()[0, 2]
    ax = plotting.plot_row(scores, TOKENS, method="alti", highlight=2)
    assert ax.get_title() == "ALTI"
    heights = [p.get_height() for p in ax.patches]
    np.testing.assert_allclose(heights, scores)
    assert matplotlib.colors.to_hex(ax.patches[0].get_facecolor()) == plotting.METHOD_COLORS["alti"]
    assert ax.patches[2].get_linewidth() == pytest.approx(1.5)
    ax2 = plotting.plot_row(scores, TOKENS, horizontal=True)
    assert [t.get_text() for t in ax2.get_yticklabels()] == TOKENS


def test_colour_tokens_html():
    scores = np.linspace(0, 1, len(TOKENS))
    html = plotting.colour_tokens_html(TOKENS, scores, label="ALTI")
    assert html.count('class="cmix-token"') == len(TOKENS)
    assert "[CLS]" in html and "ALTI" in html
    assert "rgb(255,255,255)" in html  # zero score is white
    assert "rgb(0,109,44)" in html  # max score is the darkest green
    signed = plotting.colour_tokens_html(["a", "<b>"], [-1.0, 0.5], show_values=True)
    assert "rgb(165,15,21)" in signed and "&lt;b&gt;" in signed and "<sub>" in signed
    with pytest.raises(ValueError):
        plotting.colour_tokens_html(["a"], [1.0, 2.0])
    table = plotting.saliency_table_html(TOKENS, {"alti": scores, "globenc": scores[::-1]})
    assert "GlobEnc" in table and table.count("cmix-saliency") == 2


def test_plot_alignment_heatmap_and_lines():
    df = pd.DataFrame(np.random.default_rng(1).uniform(-1, 1, (4, 3)),
                      index=pd.Index([1, 2, 3, 4], name="layer"),
                      columns=["attention", "alti", "value_zeroing"])
    ax = plotting.plot_alignment_heatmap(df, title="Spearman")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Attention", "ALTI", "Value Zeroing"]
    assert ax.get_ylabel() == "layer"
    assert len(ax.texts) == 12
    lo, hi = ax.images[0].get_clim()
    assert lo == pytest.approx(-hi)
    ax2 = plotting.plot_method_lines(df)
    assert [l.get_label() for l in ax2.get_lines()] == ["Attention", "ALTI", "Value Zeroing"]


def test_method_label_resolves_aliases_and_rollouts():
    assert plotting.method_label("grad_x_input") == plotting.METHOD_LABELS["grad_x_input_l2"]
    assert plotting.method_label("rollout:attn_norm") == "N rollout"
    assert plotting.method_color("rollout:attn_norm") == plotting.METHOD_COLORS["attn_norm"]
    assert plotting.method_color("grad_x_input") == plotting.METHOD_COLORS["grad_x_input_l2"]


@pytest.mark.parametrize("n", [2, 5, 40])
def test_mean_interval_is_scipys_t_interval_of_the_raw_values(n):
    from scipy import stats

    rng = np.random.default_rng(n)
    x = rng.normal(0.3, 0.2, size=n)
    low, high = plotting.mean_interval([x.mean()], [x.std()], [n])   # population std, ddof=0
    ref = stats.t.interval(0.95, n - 1, loc=x.mean(), scale=stats.sem(x))
    # both sides are a few float operations on values of size 1
    assert low[0] == pytest.approx(ref[0], abs=1e-12)
    assert high[0] == pytest.approx(ref[1], abs=1e-12)
    low1, _ = plotting.mean_interval([0.5], [0.1], [1])
    assert np.isnan(low1[0])                                         # no interval from one value


def test_paper_bars_never_look_like_ours():
    fig, ax = plt.subplots()
    methods = ["random", "attention", "alti"]
    plotting.plot_paper_vs_ours(ax, methods, [0.1, 0.2, 0.3], [0.0, 0.25, 0.4],
                                ours_err=np.full((2, 3), 0.05))
    from matplotlib.container import BarContainer

    paper, ours = [c for c in ax.containers if isinstance(c, BarContainer)]
    paper_faces = {matplotlib.colors.to_hex(p.get_facecolor()) for p in paper.patches}
    ours_faces = [matplotlib.colors.to_hex(p.get_facecolor()) for p in ours.patches]
    assert paper_faces == {"#ffffff"} and all(p.get_hatch() for p in paper.patches)
    assert ours_faces == [matplotlib.colors.to_hex(plotting.method_color(m)) for m in methods]
    assert "#ffffff" not in ours_faces
    assert [t.get_text() for t in ax.get_xticklabels()] == [plotting.method_label(m)
                                                             for m in methods]


def test_consistency_bars_fit_title_and_label_inside_the_figure():
    df = pd.DataFrame({"method": ["alti", "grad_l2", "integrated_gradients", "random"],
                       "mean": [0.6, 0.5, 0.4, 0.0], "ci_low": [0.5, 0.4, 0.3, -0.1],
                       "ci_high": [0.7, 0.6, 0.5, 0.1]})
    ax = plotting.plot_consistency_bars(
        df, title="Spearman ρ between model A's and model B's vectors (95% t interval)")
    fig = ax.figure
    fig.canvas.draw()
    box = fig.bbox
    for text in (ax.title, ax.yaxis.label):
        ext = text.get_window_extent()
        assert ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1, text.get_text()
        assert ext.y0 >= box.y0 - 1 and ext.y1 <= box.y1 + 1, text.get_text()
