"""Explanatory diagrams drawn by code (no data, no image files): the book's pictures of

* :func:`draw_encoder_layer` -- one post-LN encoder layer (BERT), eq. (1)-(8) of chapter 2,
  with the place where each method reads it (:data:`LAYER_READS`);
* :func:`draw_rollout` -- rollout across layers, :math:`\\hat C^{\\ell} = \\tilde C^{\\ell}
  \\hat C^{\\ell-1}`, with the identity added (attention rollout) or not (GlobEnc);
* :func:`draw_value_zeroing` -- Value Zeroing's perturbation: :math:`v^h_j \\leftarrow 0` for
  every query, the layer re-run, :math:`C_{ij} = \\mathrm{dist}(o^{\\neg j}_i, o_i)`.

Symbols are those of the book's notation table (book/conventions.md); method labels and
colours come from :mod:`cmixlib.methods.registry`. Every function returns the matplotlib Figure.
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LinearSegmentedColormap, to_rgb

from cmixlib.methods.aggregation import rollout
from cmixlib.methods.registry import method_color, method_label

#: Where each method reads the layer: (step of :func:`draw_encoder_layer`, registry name, what
#: it takes there). Steps: ``"attn"`` attention weights, ``"weighted"`` the vectors
#: alpha f(x_j), ``"residual"`` after + x_i, ``"ln1"`` after LN1, ``"ln2"`` after LN2,
#: ``"output"`` the whole layer output.
LAYER_READS: tuple[tuple[str, str, str], ...] = (
    ("attn", "attention", r"$A = \frac{1}{H}\sum_h \alpha^h$ (head mean)"),
    ("attn", "attention_rollout", r"$\tilde A = (A + I)/2$, chained over layers"),
    ("weighted", "attn_norm", r"$\|F_{ij}\|$"),
    ("residual", "attn_norm_res", r"$\|z_{ij}\|$,  $z_{ij} = F_{ij} + \delta_{ij}\, x_i$"),
    ("ln1", "attn_norm_res_ln", r"$\|T_i(x_j)\|$"),
    ("ln1", "alti_layer", r"$T_i(x_j)$ against $y_i$ (L1 distances)"),
    ("ln2", "globenc_layer", r"$\|T'_i(x_j)\|$ (through LN2)"),
    ("ln2", "globenc", r"N-Enc, rolled out without $I$"),
    ("output", "value_zeroing", r"$o_i$ against $o^{\neg j}_i$ ($v^h_j$ zeroed)"),
)

_BOX = dict(boxstyle="round,pad=0.35", facecolor="#f4f4f4", edgecolor="#555555", lw=1.0)
_TOKENS = ("[CLS]", "the", "keys", "are", "[SEP]")


def _ink(colour: str) -> str:
    """Black or white text, whichever reads better on ``colour``."""
    r, g, b = to_rgb(colour)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def _arrow(ax, xy_from, xy_to, **kw) -> None:
    style = dict(arrowstyle="-|>", color="#444444", lw=1.1, shrinkA=0, shrinkB=0)
    style.update(kw)
    ax.annotate("", xy=xy_to, xytext=xy_from, arrowprops=style)


def _tag(ax, x: float, y: float, name: str, note: str, fontsize: float = 9) -> None:
    """A coloured tag with the registry label of ``name``, then ``note`` at x + 2.2."""
    colour = method_color(name)
    ax.text(x, y, method_label(name), ha="left", va="center", fontsize=fontsize,
            color=_ink(colour), fontweight="bold",
            bbox=dict(boxstyle="round,pad=0.25", facecolor=colour, edgecolor="none"))
    ax.text(x + 2.2, y, note, ha="left", va="center", fontsize=fontsize)


def draw_encoder_layer(ax=None):
    """One post-LN encoder layer, top to bottom, eq. (1)-(8) of chapter 2:

    x_j -> alpha^h_ij and f^h(x_j) -> F_ij = sum_h alpha^h_ij f^h(x_j) -> a_i = sum_j F_ij + b_O
    -> p_i = a_i + x_i -> y_i = LN1(p_i) -> u_i = y_i + FFN(y_i) -> o_i = LN2(u_i),

    with a coloured tag (registry label and colour) at each place a method reads
    (:data:`LAYER_READS`). Draws into ``ax`` when given; returns the Figure.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(11.5, 9.0))
    fig = ax.figure
    ax.set_xlim(0, 13)
    ax.set_ylim(-0.6, 13.0)
    ax.axis("off")
    cx, right = 3.5, 5.9
    ys = {"input": 12.4, "attn": 11.0, "weighted": 9.6, "sum": 8.2, "residual": 6.8,
          "ln1": 5.4, "ffn": 4.0, "res2": 2.6, "ln2": 1.2, "output": -0.2}
    steps = {
        "weighted": r"weighted vectors $\alpha^h_{ij} f^h(x_j)$;  $F_{ij} = "
                    r"\sum_h \alpha^h_{ij} f^h(x_j)$",
        "sum": r"sum over $j$:  $a_i = \sum_j F_{ij} + b_O$",
        "residual": r"residual:  $p_i = a_i + x_i$",
        "ln1": r"LN1:  $y_i = \mathrm{LN}_1(p_i)$",
        "ffn": r"FFN:  $\mathrm{GELU}(y_i W_1 + b_1)\, W_2 + b_2$",
        "res2": r"residual:  $u_i = y_i + \mathrm{FFN}(y_i)$",
        "ln2": r"LN2:  $o_i = \mathrm{LN}_2(u_i)$",
    }
    ax.text(cx, ys["input"], r"layer input $x_1, \dots, x_n$  (token $j$ sends, $i$ receives)",
            ha="center", va="center", fontsize=10)
    # the two branches of attention: weights from queries and keys, value vectors
    ax.text(2.25, ys["attn"], "attention weights\n" r"$\alpha^h_{ij} = \mathrm{softmax}_j"
            r"(q^h_i \cdot k^h_j / \sqrt{d_h})$", ha="center", va="center", fontsize=8.5,
            bbox=_BOX)
    ax.text(4.85, ys["attn"], "value vectors\n" r"$f^h(x_j) = (x_j W^h_V + b^h_V)\, W^h_O$",
            ha="center", va="center", fontsize=8.5, bbox=_BOX)
    for x in (2.25, 4.85):
        _arrow(ax, (x, ys["input"] - 0.3), (x, ys["attn"] + 0.55))
        _arrow(ax, (x, ys["attn"] - 0.55), (x, ys["weighted"] + 0.35))
    for key, text in steps.items():
        ax.text(cx, ys[key], text, ha="center", va="center", fontsize=9.5, bbox=_BOX)
    order = ["weighted", "sum", "residual", "ln1", "ffn", "res2", "ln2"]
    for a, b in zip(order, order[1:]):
        _arrow(ax, (cx, ys[a] - 0.35), (cx, ys[b] + 0.35))
    _arrow(ax, (cx, ys["ln2"] - 0.35), (cx, ys["output"] + 0.3))
    ax.text(cx, ys["output"], r"layer output $o_i$ (the next layer's $x_i$)", ha="center",
            va="center", fontsize=10)
    # the two residual connections, drawn on the left
    for start, top, bottom, label in ((0.95, ys["input"], ys["residual"], r"$x_i$"),
                                      (cx, ys["ln1"] - 0.5, ys["res2"], r"$y_i$")):
        ax.plot([start, 0.35, 0.35], [top, top, bottom], color="#888888", lw=1.1)
        _arrow(ax, (0.35, bottom), (0.75, bottom), color="#888888")
        ax.text(0.2, (top + bottom) / 2, label, ha="right", va="center", fontsize=10,
                color="#666666")
    # where each method reads: tags on the right, dashed leaders to the step
    by_step: dict[str, list[tuple[str, str]]] = {}
    for step, name, note in LAYER_READS:
        by_step.setdefault(step, []).append((name, note))
    tag_x = 7.0
    for step, entries in by_step.items():
        y0 = ys[step]
        offsets = [0.0] if len(entries) == 1 else [0.27, -0.27]
        ax.plot([right + 0.3, tag_x - 0.15], [y0, y0], ls=":", color="#999999", lw=1.0)
        for (name, note), dy in zip(entries, offsets):
            _tag(ax, tag_x, y0 + dy, name, note)
    # Value Zeroing perturbs the value vectors and reads the whole layer output
    vz = method_color("value_zeroing")
    ax.plot([12.75, 12.85, 12.85, 12.75], [ys["attn"], ys["attn"], ys["output"], ys["output"]],
            color=vz, lw=2.0)
    ax.text(12.95, (ys["attn"] + ys["output"]) / 2, "the whole layer is re-run",
            rotation=90, ha="left", va="center", fontsize=8.5, color="#444444")
    ax.annotate(r"$v^h_j \leftarrow 0$", xy=(6.2, ys["attn"] + 0.2), xytext=(7.0, 12.35),
                fontsize=9, color=vz, fontweight="bold", va="center",
                arrowprops=dict(arrowstyle="-|>", color=vz, lw=1.0))
    ax.text(8.2, 12.35, "(Value Zeroing's perturbation)", fontsize=8.5, va="center",
            color="#444444")
    ax.set_title("Where each method reads a post-LN encoder layer", fontsize=11)
    return fig


def draw_rollout(maps=None, tokens: Sequence[str] | None = None, *,
                 add_identity: bool | None = None, receiver: int | None = None):
    """Rollout across layers as a layered graph: one column of tokens per layer, an edge j -> i
    from column l-1 to column l with width C~^l_ij, and the product

        C^^1 = C~^1,   C^^l = C~^l C^^(l-1)   (current layer on the left),

    with C~^l = (C^l + I) / 2 for attention rollout (``add_identity=True``) and C~^l =
    rownorm(C^l) for GlobEnc (``False``); ``None`` draws both side by side. ``maps``: (L, n, n)
    non-negative layer maps (default: a fixed illustrative example of 3 layers, 5 tokens).
    Bars left of the input column: row ``receiver`` (default: the middle token) of C^^L.
    Returns the Figure.
    """
    if maps is None:
        rng = np.random.default_rng(3)
        maps = rng.dirichlet(np.full(len(_TOKENS), 0.6), size=(3, len(_TOKENS)))
        tokens = _TOKENS if tokens is None else tokens
    maps = np.asarray(maps, dtype=float)
    if maps.ndim != 3 or maps.shape[1] != maps.shape[2] or (maps < 0).any():
        raise ValueError(f"maps must be non-negative (L, n, n) layer maps, got {maps.shape}")
    n_layers, n = maps.shape[0], maps.shape[1]
    tokens = list(tokens) if tokens is not None else [str(k) for k in range(n)]
    if len(tokens) != n:
        raise ValueError(f"{len(tokens)} tokens for maps of {n} tokens: pass one per row")
    receiver = n // 2 if receiver is None else receiver
    modes = [True, False] if add_identity is None else [bool(add_identity)]
    fig, axes = plt.subplots(1, len(modes), figsize=(6.2 * len(modes), 0.55 * n + 2.6),
                             squeeze=False)
    for ax, identity in zip(axes[0], modes):
        name = "attention_rollout" if identity else "globenc"
        colour = method_color(name)
        tilde = np.concatenate([rollout(maps[k:k + 1], add_identity=identity)
                                for k in range(n_layers)])
        hat = rollout(maps, add_identity=identity)
        ys = n - 1 - np.arange(n)
        for ell in range(1, n_layers + 1):
            for i in range(n):
                for j in range(n):
                    w = tilde[ell - 1, i, j]
                    ax.plot([ell - 1, ell], [ys[j], ys[i]], color=colour, alpha=0.25 + 0.75 * w,
                            lw=0.3 + 5.0 * w, solid_capstyle="round", zorder=1)
            ax.text(ell - 0.5, n - 0.35, rf"$\tilde C^{{{ell}}}$", ha="center", fontsize=10)
        for ell in range(n_layers + 1):
            ax.scatter(np.full(n, ell), ys, s=60, color="white", edgecolor="#333333", zorder=3)
            ax.text(ell, -0.9, r"input" if ell == 0 else rf"$\ell = {ell}$", ha="center",
                    fontsize=9)
        ax.scatter([n_layers], [ys[receiver]], s=160, facecolor="none", edgecolor="black",
                   lw=2.0, zorder=4)
        ax.text(n_layers + 0.15, ys[receiver], f"  $i$ = {tokens[receiver]}", va="center",
                fontsize=9)
        # row `receiver` of the last rollout map, as bars left of the input tokens
        row = hat[-1, receiver]
        for j in range(n):
            ax.barh(ys[j], -0.9 * row[j] / row.max(), left=-0.75, height=0.5, color=colour,
                    alpha=0.9)
            ax.text(-0.7, ys[j], tokens[j], ha="left", va="center", fontsize=9)
        ax.text(-1.2, n - 0.35, rf"$\hat C^{{{n_layers}}}_{{ij}}$", ha="center", fontsize=10)
        rule = (r"$\tilde C^{\ell} = (C^{\ell} + I)/2$" if identity
                else r"$\tilde C^{\ell}$ = row-normalised $C^{\ell}$ (no $I$)")
        ax.set_title(f"{method_label(name)}: {rule}\n"
                     r"$\hat C^{1} = \tilde C^{1}$,  $\hat C^{\ell} = \tilde C^{\ell}\,"
                     r"\hat C^{\ell-1}$", fontsize=10)
        ax.set_xlim(-2.1, n_layers + 1.3)
        ax.set_ylim(-1.2, n)
        ax.axis("off")
    fig.tight_layout()
    return fig


def draw_value_zeroing(tokens: Sequence[str] | None = None, j: int | None = None):
    """Value Zeroing's perturbation for one contributing token ``j`` (default: the middle one):
    v^h_j <- 0 in every head and for every query (the weights alpha^h_ik kept, not
    renormalised), the layer re-run from its original input, and each output compared,

        C_ij = dist(o^{-j}_i, o_i)   (cosine distance in the paper),

    which fills column j of the layer map C; after one run per j each row is normalised to sum
    to 1. The values drawn in the matrix are illustrative. Returns the Figure.
    """
    tokens = list(_TOKENS if tokens is None else tokens)
    n = len(tokens)
    if n < 2:
        raise ValueError("draw_value_zeroing needs at least two tokens")
    j = n // 2 if j is None else j
    if not 0 <= j < n:
        raise ValueError(f"j={j} is not a token index 0..{n - 1}")
    vz = method_color("value_zeroing")
    fig, (ax, mx) = plt.subplots(1, 2, figsize=(12.5, 5.0),
                                 gridspec_kw=dict(width_ratios=[2.3, 1.0]))
    xs = np.arange(n) * 1.6
    y_v, y_box, y_alt, y_orig = 0.0, 1.9, 3.7, 5.1
    for k, x in enumerate(xs):
        zeroed = k == j
        ax.text(x, y_v - 0.85, tokens[k], ha="center", fontsize=9)
        ax.text(x, y_v, r"$v^h_j \leftarrow 0$" if zeroed else rf"$v^h_{{{k + 1}}}$",
                ha="center", va="center", fontsize=9.5,
                color=_ink(vz) if zeroed else "black",
                bbox=dict(boxstyle="round,pad=0.3", facecolor=vz if zeroed else "#f4f4f4",
                          edgecolor="#555555", hatch=None))
        for x_to in xs:   # every query i mixes every value k with alpha^h_ik
            ax.plot([x, x_to], [y_v + 0.3, y_box - 0.45], color=vz if zeroed else "#bbbbbb",
                    ls="--" if zeroed else "-", lw=1.2 if zeroed else 0.6, zorder=0)
    ax.text(xs.mean(), y_box, r"rest of the layer, re-run from its original input:  "
            r"$\sum_k \alpha^h_{ik} v^h_k$,  $W_O$,  $+\,x_i$,  LN1,  FFN,  LN2",
            ha="center", va="center", fontsize=9.5,
            bbox=dict(boxstyle="round,pad=0.4", facecolor="#f4f4f4", edgecolor="#555555"))
    for i, x in enumerate(xs):
        _arrow(ax, (x, y_box + 0.4), (x, y_alt - 0.35))
        ax.text(x, y_alt, rf"$o^{{\neg j}}_{{{i + 1}}}$", ha="center", va="center",
                fontsize=10, bbox=dict(boxstyle="round,pad=0.3", facecolor="white",
                                       edgecolor=vz))
        ax.text(x, y_orig, rf"$o_{{{i + 1}}}$", ha="center", va="center", fontsize=10,
                bbox=dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor="#555555"))
        ax.annotate("", xy=(x, y_orig - 0.3), xytext=(x, y_alt + 0.3),
                    arrowprops=dict(arrowstyle="<->", color="#444444", lw=1.0))
        ax.text(x + 0.1, (y_alt + y_orig) / 2, rf"$C_{{{i + 1}j}}$", ha="left", va="center",
                fontsize=9, color=vz, fontweight="bold")
    ax.text(xs[-1] + 1.0, y_orig, "original\noutputs", va="center", fontsize=8.5)
    ax.text(xs[-1] + 1.0, y_alt, "outputs with\n" r"$v^h_j$ zeroed", va="center", fontsize=8.5)
    ax.text(xs[-1] + 1.0, (y_alt + y_orig) / 2, r"$C_{ij} = \mathrm{dist}(o^{\neg j}_i, o_i)$",
            va="center", fontsize=9)
    ax.text(xs.mean(), y_v - 1.55, rf"token $j$ = {tokens[j]}: its value vector is zeroed in "
            r"every head, for every query $i$; the weights $\alpha^h_{ik}$ are kept",
            ha="center", fontsize=9)
    ax.set_xlim(xs[0] - 0.9, xs[-1] + 3.6)
    ax.set_ylim(y_v - 1.9, y_orig + 0.7)
    ax.axis("off")
    # the layer map: this run fills column j
    rng = np.random.default_rng(7)
    col = rng.uniform(0.15, 0.6, n)
    col[j] = 0.9
    grid = np.full((n, n), np.nan)
    grid[:, j] = col

    cmap = LinearSegmentedColormap.from_list("vz", ["white", vz])
    mx.imshow(np.zeros((n, n)), cmap="Greys", vmin=0, vmax=10)
    mx.imshow(grid, cmap=cmap, vmin=0, vmax=1)
    mx.set_xticks(range(n), [f"{t}" for t in tokens], rotation=90, fontsize=9)
    mx.set_yticks(range(n), [f"{t}" for t in tokens], fontsize=9)
    mx.set_xticks(np.arange(n + 1) - 0.5, minor=True)
    mx.set_yticks(np.arange(n + 1) - 0.5, minor=True)
    mx.grid(which="minor", color="#cccccc", lw=0.8)
    mx.tick_params(which="minor", length=0)
    mx.set_xlabel("contributing token j")
    mx.set_ylabel("receiving token i")
    mx.set_title(f"{method_label('value_zeroing')} map $C$: this run\nfills column $j$; "
                 "then rows sum to 1", fontsize=10)
    fig.tight_layout()
    return fig
