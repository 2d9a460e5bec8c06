"""Readability fixes of issue 43 that a chapter could silently lose: one model description per
page, long per-item outputs folded, chapter 15's explorer first and without progress widgets,
confidence intervals instead of ± std, paper bars unlike ours, the log axis of chapter 10's
compression plot, HTML escaping of tokens in chapter 14's captions, chance levels in chapter 9
before its results."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NB = ROOT / "notebooks"


def _nb(name):
    import nbformat

    return nbformat.read(NB / name, as_version=4)


def _by_id(name):
    return {c.get("id"): c for c in _nb(name).cells}


def test_model_line_prints_a_description_once_then_by_name():
    from cmixlib.book import notebook as book

    book._described.clear()
    base = ("tiny-encoder (bert, 2 layers, hidden 32): adapted on some text "
            "-- offline fallback for 'bert-base-uncased'")
    tuned = ("tiny-encoder (bert, 2 layers, hidden 32): adapted on some text; prompt-fine-tuned "
             "on agreement -- offline fallback for 'bert-base-uncased'; accuracy 0.9")
    assert book.model_line(base) == base
    assert book.model_line(base) == "tiny-encoder (described above)"
    assert book.model_line(tuned) == ("tiny-encoder as above; prompt-fine-tuned on agreement; "
                                      "accuracy 0.9")
    assert book.model_line(tuned) == "tiny-encoder (described above)"
    assert book.short_model(base) == "tiny-encoder"
    clf = "tiny-encoder (bert, 2 layers, hidden 32); accuracy 0.8"
    many = f"sst2: {clf} | mnli: {clf.replace('0.8', '0.7')}"
    assert book.model_line(many) == many
    assert book.model_line(clf) == "tiny-encoder (described above)"
    book._described.clear()


def test_describe_run_prints_the_model_through_model_line():
    import inspect

    from cmixlib.book import runs as book_runs

    assert "model_line(m['model'])" in inspect.getsource(book_runs.describe_run)


@pytest.mark.parametrize("cell_id, what", [("f1ab50fb", "the 24-row rank table"),
                                           ("efed16d8", "Figure 4's 12-column table")])
def test_chapter_13_folds_its_long_tables(cell_id, what):
    assert "hide-output" in _by_id("13_globenc_evaluations.ipynb")[cell_id].metadata.get("tags", [])


def test_chapter_13_summarises_the_per_sentence_timings():
    src = _by_id("13_globenc_evaluations.ipynb")["9f22a188"].source
    assert "np.median(hta_s)" in src
    assert 'print("HTA wall time per sentence (s):",' not in src


def test_chapter_15_leads_with_the_explorer_without_progress_widgets():
    cells = _nb("15_explore.ipynb").cells
    code = [c for c in cells if c.cell_type == "code"]
    first = code[1].source                          # code[0] is the Colab setup cell
    assert "explorer_html(static)" in first
    assert "progress=False" in first and "capture_output()" in first
    headings = [c.source.splitlines()[0] for c in cells if c.cell_type == "markdown"]
    assert headings[0].startswith("# Explore")
    assert cells.index(code[1]) < min(i for i, c in enumerate(cells)
                                      if c.cell_type == "markdown" and "**Controls.**" in c.source)


@pytest.mark.parametrize("name", ["10_probing.ipynb", "11_faithfulness.ipynb",
                                  "12_alti_evaluations.ipynb"])
def test_paper_bars_are_drawn_unlike_ours_with_intervals(name):
    code = "\n".join(c.source for c in _nb(name).cells if c.cell_type == "code")
    assert "plot_paper_vs_ours(" in code
    assert 'color="#cccccc", label="paper' not in code
    assert 'yerr=ours["std"]' not in code and 'yerr=p["std"]' not in code


def test_chapter_10_compression_on_a_log_axis_and_p_values_over_the_layers():
    cells = _by_id("10_probing.ipynb")
    assert 'ax.set_yscale("log")' in cells["c8ebe053"].source
    src = cells["ch10-pvalue"].source
    assert "Random's rho is" in src and "p_value(" in src


def test_chapter_14_escapes_every_value_in_its_html_captions():
    # MPNet's "<mask>" inserted unescaped vanished from the page as an unknown HTML tag
    src = "\n".join(c.source for c in _nb("14_paper_examples.ipynb").cells
                    if c.cell_type == "code")
    heads = re.findall(r"head = \(?f\"<p style.*?</p>\"\)?", src, flags=re.S)
    assert len(heads) >= 2
    for head in heads:
        values = re.findall(r"(?<!\{)\{([^{}]+)\}", head.split("<i>", 1)[1])
        assert values and all(v.startswith("html.escape(") for v in values), head


def test_chapter_9_states_what_chance_scores_before_the_results():
    cells = _nb("09_cue_alignment.ipynb").cells
    where = next(i for i, c in enumerate(cells) if "What chance scores" in c.source)
    results = next(i for i, c in enumerate(cells) if c.source.startswith("## Figures 1, 2"))
    assert where < results
    text = cells[where].source
    assert "$1/n$" in text and "$H_n / n$" in text and "$(n - 1)/2$" in text
