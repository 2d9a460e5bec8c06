"""Every public entry point checks its arguments: one table of bad inputs, each with the error it
must raise and a pattern its message must match (the argument's name, what it got, what is
allowed), then valid edge inputs that must keep working. Tiny random models; a few seconds."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import cmixlib
from cmixlib import InputError, UnsupportedModelError, cli
from cmixlib.metrics import evaluation as ev
from cmixlib.metrics import statistics as st
from cmixlib import gradients as G
from cmixlib.experiments import runner
from cmixlib.models.devices import default_device, resolve_device

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class E(str):
    """A placeholder in a case's kwargs, replaced by the object of that name (:func:`objects`, or a
    fixture of tests/conftest.py)."""


MODEL, MLM, TOK = E("model"), E("mlm"), E("packaged_tokenizer")
IDS = {"input_ids": torch.tensor([[1, 5, 6, 7, 2]])}                 # n = 5
BATCH = {"input_ids": torch.tensor([[1, 5, 6, 2], [1, 7, 2, 0]]),
         "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])}
MAPS = np.full((2, 3, 3), 1 / 3)
cm, cmr = cmixlib.context_mixing, cmixlib.context_mixing_ratio


@pytest.fixture(scope="module")
def objects():
    return {"model": cmixlib.random_model("bert", layers=1),
            "mlm": cmixlib.random_model("bert", layers=1, task="mlm")}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """No case may write to the shared result cache (each bad run must fail before any work)."""
    monkeypatch.setenv("CMIX_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CMIX_DEVICE", raising=False)


def case(label, fn, error, pattern, /, **kwargs):
    """One row: ``fn(**kwargs)`` must raise ``error`` with a message matching ``pattern``."""
    return pytest.param(fn, kwargs, error, pattern, id=label)


def with_nan(a):
    a = a.copy()
    a[0, 0, 0] = np.nan
    return a


def with_inf(a):
    a = a.copy()
    a[1, 2, 1] = np.inf
    return a


CASES = [
    # --- context_mixing: text ---------------------------------------------------------------
    case("text None", cm, TypeError, r"text must be a string, a list of strings or a mapping.*got None",
         model=MODEL, tokenizer=None, text=None),
    case("text int", cm, TypeError, r"text must be .*got int 3", model=MODEL, tokenizer=None, text=3),
    case("text bytes", cm, TypeError, r"text is bytes: decode it first", model=MODEL, tokenizer=None,
         text=b"the keys"),
    case("text list with an int", cm, TypeError, r"text\[1\] is int 5: a batch is a list of strings.*input_ids",
         model=MODEL, tokenizer=None, text=["the keys", 5]),
    case("text tensor", cm, TypeError, r"text is Tensor.*\{'input_ids': ids\}", model=MODEL, tokenizer=None,
         text=torch.tensor([1, 5, 2])),
    case("text empty string", cm, InputError, r"Empty text '  ': context mixing needs at least one word",
         model=MODEL, tokenizer=None, text="  "),
    case("text empty in batch", cm, InputError, r"Empty text '' \(text\[1\]\)", model=MODEL, tokenizer=None,
         text=["a b", ""]),
    case("text empty list", cm, InputError, r"No text given", model=MODEL, tokenizer=None, text=[]),
    case("text without tokenizer", cm, InputError, r"Pass the tokenizer", model=MODEL, tokenizer=None,
         text="the keys"),
    case("text too long", cm, InputError, r"Input has 200 tokens but the model accepts at most 128",
         model=MODEL, tokenizer=None, text={"input_ids": torch.full((1, 200), 5)}),
    case("mapping without input_ids", cm, InputError, r"must hold 'input_ids'.*\['ids'\]", model=MODEL,
         tokenizer=None, text={"ids": [1, 2]}),
    case("tokenizer of a bigger vocabulary", cm, InputError,
         r"input_ids holds id \d+, but the vocabulary has 120 entries.*another model's tokenizer",
         model=MODEL, tokenizer=TOK, text="the keys to the cabinet"),
    # --- context_mixing: ids and mask -----------------------------------------------------------
    case("ids >= vocab", cm, InputError, r"input_ids holds id 500, but the vocabulary has 120 entries \(ids 0..119\)",
         model=MODEL, tokenizer=None, text={"input_ids": [[1, 500, 2]]}),
    case("ids negative", cm, InputError, r"input_ids holds id -3: token ids are >= 0", model=MODEL,
         tokenizer=None, text={"input_ids": [[1, -3, 2]]}),
    case("ids 3-D", cm, InputError, r"input_ids must have shape \(n,\) or \(batch, n\); got shape \(1, 1, 3\)",
         model=MODEL, tokenizer=None, text={"input_ids": torch.ones(1, 1, 3, dtype=torch.long)}),
    case("ids float", cm, InputError, r"input_ids must hold integer token ids; got Tensor .*float32",
         model=MODEL, tokenizer=None, text={"input_ids": torch.tensor([[1.0, 5.5, 2.0]])}),
    case("ids ragged", cm, InputError, r"input_ids must be .*rectangular array.*attention_mask", model=MODEL,
         tokenizer=None, text={"input_ids": [[1, 5, 2], [1, 2]]}),
    case("ids strings", cm, TypeError, r"input_ids must be integer token ids.*got list \[\['the', 'keys'\]\]",
         model=MODEL, tokenizer=None, text={"input_ids": [["the", "keys"]]}),
    case("ids empty", cm, InputError, r"Empty input_ids", model=MODEL, tokenizer=None,
         text={"input_ids": torch.zeros(1, 0, dtype=torch.long)}),
    case("mask of another shape", cm, InputError,
         r"attention_mask has shape \(1, 2\) but input_ids has shape \(1, 3\): they must match",
         model=MODEL, tokenizer=None, text={"input_ids": [[1, 5, 2]], "attention_mask": [[1, 1]]}),
    case("mask values not 0/1", cm, InputError, r"attention_mask must hold only 0 \(padding\) and 1.*\[2\]",
         model=MODEL, tokenizer=None, text={"input_ids": [[1, 5, 2]], "attention_mask": [[1, 2, 1]]}),
    case("mask all-zero row", cm, InputError, r"attention_mask rows \[1\] are all 0", model=MODEL,
         tokenizer=None, text={"input_ids": [[1, 5, 2], [1, 6, 2]], "attention_mask": [[1, 1, 1], [0, 0, 0]]}),
    # --- context_mixing: model, tokenizer, options ----------------------------------------------
    case("tokenizer a list", cm, TypeError, r"tokenizer must be a Hugging Face tokenizer \(callable\).*list",
         model=MODEL, tokenizer=["a", "b"], text="the keys"),
    case("model a string", cm, UnsupportedModelError,
         r"model must be a Hugging Face encoder \(a torch.nn.Module.*got str 'bert-base-uncased'.*load_model",
         model="bert-base-uncased", tokenizer=None, text=IDS),
    case("model not an encoder", cm, UnsupportedModelError, r"cmixlib cannot read Linear.*Supported: BERT",
         model=torch.nn.Linear(2, 2), tokenizer=None, text=IDS),
    case("methods an int", cm, TypeError, r"methods must be a method name, a list of method names or None; got int 3",
         model=MODEL, tokenizer=None, text=IDS, methods=3),
    case("methods with an int", cm, TypeError, r"methods\[1\] is int 5: method names are strings",
         model=MODEL, tokenizer=None, text=IDS, methods=["alti", 5]),
    case("methods empty", cm, InputError, r"methods is empty: pass None", model=MODEL, tokenizer=None,
         text=IDS, methods=[]),
    case("methods unknown", cm, InputError, r"Unknown method\(s\) \['alti_flow'\] in methods\. Valid names: attention",
         model=MODEL, tokenizer=None, text=IDS, methods=["alti_flow"]),
    case("normalize a string", cm, TypeError, r"normalize must be True or False; got str 'yes'",
         model=MODEL, tokenizer=None, text=IDS, normalize="yes"),
    case("normalize_layers an int", cmixlib.MixingMethod, TypeError,
         r"normalize_layers must be True or False; got int 1", name="globenc",
         normalize_layers=1),
    case("normalize_layers on a layer map", cmixlib.MixingMethod, InputError,
         r"normalize_layers=False is an option of the rollouts of layer maps", name="alti_layer",
         normalize_layers=False),
    case("distance unknown", cmixlib.ValueZeroing, InputError,
         r"Unknown Value Zeroing distance 'manhattan': distance must be one of 'cosine', 'euclidean'",
         distance="manhattan"),
    case("distance None", cmixlib.ValueZeroing, TypeError,
         r"distance must be a string, one of 'cosine'", distance=None),
    case("ValueZeroing for another method", cmixlib.ValueZeroing, InputError,
         r"Unknown method 'alti': name must be one of 'value_zeroing', 'value_zeroing_rollout'",
         name="alti"),
    case("an old keyword", cm, TypeError,
         r"context_mixing\(\) has no vz_distance= any more: .* Pass ValueZeroing\(distance=\.\.\.\)",
         model=MODEL, tokenizer=None, text=IDS, vz_distance="euclidean"),
    case("an unknown keyword", cm, TypeError,
         r"context_mixing\(\) got an unexpected keyword argument 'distance'",
         model=MODEL, tokenizer=None, text=IDS, distance="euclidean"),
    case("one method twice", cm, InputError, r"methods asks for \['value_zeroing'\] more than once",
         model=MODEL, tokenizer=None, text=IDS,
         methods=["value_zeroing", cmixlib.ValueZeroing(distance="euclidean")]),
    case("two Value Zeroing settings", cm, InputError, r"differ in their Value Zeroing settings",
         model=MODEL, tokenizer=None, text=IDS,
         methods=["value_zeroing", cmixlib.ValueZeroing("value_zeroing_rollout",
                                                        distance="euclidean")]),
    case("standardize wrong shape", cm, InputError,
         r"standardize's mean has shape \(3,\), but the model's hidden size is 32: it must be \(32,\)",
         model=MODEL, tokenizer=None, text=IDS,
         methods=[cmixlib.ValueZeroing(standardize=(np.zeros(3), np.ones(3)))]),
    case("standardize a string", cm, TypeError,
         r"standardize must be None, True/False or a \(mean, std\) pair of arrays of shape \(32,\); got str",
         model=MODEL, tokenizer=None, text=IDS, methods=[cmixlib.ValueZeroing(standardize="yes")]),
    case("standardize zero std", cm, InputError, r"standardize's std must be > 0", model=MODEL,
         tokenizer=None, text=IDS,
         methods=[cmixlib.ValueZeroing(standardize=(np.zeros(32), np.zeros(32)))]),
    # --- context_mixing: rows -----------------------------------------------------------------
    case("rows negative", cm, InputError,
         r"rows=\[-1\] out of range for a sequence of 5 tokens \(0..4\); negative positions are not accepted",
         model=MODEL, tokenizer=None, text=IDS, rows=[-1]),
    case("rows fractional", cm, InputError, r"rows must hold integer positions \(0..4\); got fractional.*1\.5",
         model=MODEL, tokenizer=None, text=IDS, rows=[1.5]),
    case("rows whole float", cm, InputError, r"rows must hold integer positions.*float", model=MODEL,
         tokenizer=None, text=IDS, rows=np.array([2.0])),
    case("rows a bool", cm, InputError, r"rows must hold integer positions \(0..4\); got the boolean True",
         model=MODEL, tokenizer=None, text=IDS, rows=True),
    case("rows a bool list", cm, InputError, r"rows must hold integer positions.*booleans", model=MODEL,
         tokenizer=None, text=IDS, rows=[True, False]),
    case("rows a string", cm, TypeError, r"rows must be an integer position or a list of them; got str 'x'",
         model=MODEL, tokenizer=None, text=IDS, rows="x"),
    case("rows empty", cm, InputError, r"rows is empty: pass None", model=MODEL, tokenizer=None, text=IDS,
         rows=[]),
    case("rows too large", cm, InputError, r"rows=\[7\] out of range for a sequence of 5 tokens", model=MODEL,
         tokenizer=None, text=IDS, rows=[7]),
    case("rows nested for one text", cm, InputError, r"rows has 2 per-sentence entries for a batch of 1",
         model=MODEL, tokenizer=None, text=IDS, rows=[[1], [2]]),
    case("rows a 2-D array", cm, InputError, r"rows must be a flat list of positions; got shape \(2, 1\)",
         model=MODEL, tokenizer=None, text=IDS, rows=np.array([[1], [2]])),
    case("rows per sentence, too many", cm, InputError, r"rows has 3 per-sentence entries for a batch of 2",
         model=MODEL, tokenizer=None, text=BATCH, rows=[[1], [2], [0]]),
    case("rows per sentence, out of range", cm, InputError,
         r"rows\[1\]=\[3\] out of range for a sequence of 3 tokens", model=MODEL, tokenizer=None,
         text=BATCH, rows=[[3], [3]]),
    # --- context_mixing_ratio, check_methods, tokens --------------------------------------------
    case("ratio kind unknown", cmr, InputError,
         r"Unknown mixing-ratio kind 'attn_norm': kind must be one of 'attn_norm_res', 'attn_norm_res_ln'",
         model=MODEL, tokenizer=None, text=IDS, kind="attn_norm"),
    case("ratio kind not a string", cmr, TypeError, r"kind must be a string", model=MODEL, tokenizer=None,
         text=IDS, kind=2),
    case("ratio ids >= vocab", cmr, InputError, r"input_ids holds id 999", model=MODEL, tokenizer=None,
         text={"input_ids": [1, 999, 2]}),
    case("check_methods an int", cmixlib.check_methods, TypeError, r"methods must be a method name",
         methods=7),
    case("tokens: tokenizer a list", cmixlib.tokens, TypeError,
         r"tokenizer must be a Hugging Face tokenizer \(with convert_ids_to_tokens\); got list",
         tokenizer=[], input_ids=[1, 2]),
    case("tokens: a batch", cmixlib.tokens, InputError, r"input_ids must be one sequence.*got shape \(2, 2\)",
         tokenizer=TOK, input_ids=[[101, 102], [101, 102]]),
    case("tokens: id outside the vocabulary", cmixlib.tokens, InputError, r"input_ids holds id 10000000",
         tokenizer=TOK, input_ids=[101, 10**7]),
    case("tokens: float ids", cmixlib.tokens, InputError, r"input_ids must hold integer token ids",
         tokenizer=TOK, input_ids=[101.5]),
    # --- rollout, attention_flow, normalize_rows --------------------------------------------------
    case("rollout 2-D", cmixlib.rollout, InputError, r"maps must have shape \(num_layers, n, n\); got shape \(3, 3\)",
         maps=np.eye(3)),
    case("rollout not square", cmixlib.rollout, InputError,
         r"maps must be square in its last two dimensions.*\(1, 2, 3\)",
         maps=np.ones((1, 2, 3))),
    case("rollout NaN", cmixlib.rollout, InputError, r"maps contains NaN.*rows=", maps=with_nan(MAPS)),
    case("rollout inf", cmixlib.rollout, InputError, r"maps contains inf", maps=with_inf(MAPS)),
    case("rollout negative", cmixlib.rollout, InputError,
         r"maps has negative entries \(min -0\.333\): rollout with row normalisation needs non-negative",
         maps=-MAPS),
    case("rollout a string", cmixlib.rollout, TypeError, r"maps must be an array of numbers; got str", maps="abc"),
    case("rollout None", cmixlib.rollout, TypeError, r"maps must be an array of numbers; got None", maps=None),
    case("rollout object list", cmixlib.rollout, TypeError, r"maps must hold real numbers",
         maps=[[["a", "b"], ["c", "d"]]]),
    case("rollout empty", cmixlib.rollout, InputError, r"maps is empty", maps=np.ones((0, 2, 2))),
    case("rollout add_identity a string", cmixlib.rollout, TypeError, r"add_identity must be True or False",
         maps=MAPS, add_identity="yes"),
    case("flow negative", cmixlib.attention_flow, InputError, r"maps has negative entries.*attention flow",
         maps=MAPS - 0.5),
    case("flow rows too large", cmixlib.attention_flow, InputError, r"rows=\[5\] out of range for a sequence of 3",
         maps=MAPS, rows=[5]),
    case("flow rows negative", cmixlib.attention_flow, InputError, r"rows=\[-1\] out of range.*negative",
         maps=MAPS, rows=[-1]),
    case("flow rows fractional", cmixlib.attention_flow, InputError, r"rows must hold integer positions",
         maps=MAPS, rows=[0.5]),
    case("flow 4-D", cmixlib.attention_flow, InputError, r"maps must have shape \(num_layers, n, n\)",
         maps=np.ones((1, 1, 2, 2))),
    case("normalize_rows negative", cmixlib.normalize_rows, InputError,
         r"mat has negative entries \(min -1\): normalize_rows", mat=[[1.0, -1.0]]),
    case("normalize_rows inf", cmixlib.normalize_rows, InputError, r"mat contains inf", mat=[[1.0, np.inf]]),
    case("normalize_rows strings", cmixlib.normalize_rows, TypeError, r"mat must hold real numbers",
         mat=[["a"]]),
    case("normalize_rows a scalar", cmixlib.normalize_rows, InputError,
         r"mat must have at least one dimension; got a scalar", mat=3.0),
    # --- experiments ------------------------------------------------------------------------------
    case("experiment unknown", cmixlib.run_experiment, InputError,
         r"Unknown experiment 'no-such': name must be one of 'alti-fig3-anisotropy'", name="no-such"),
    case("experiment name an int", cmixlib.run_experiment, TypeError, r"name must be a string", name=3),
    case("limit negative", cmixlib.run_experiment, InputError, r"limit must be >= 1; got -3",
         name="globenc-fig5-ln-outliers", limit=-3),
    case("limit zero", cmixlib.run_experiment, InputError, r"limit must be >= 1; got 0",
         name="globenc-fig5-ln-outliers", limit=0),
    case("limit a string", cmixlib.run_experiment, TypeError, r"limit must be an integer or None; got str 'x'",
         name="globenc-fig5-ln-outliers", limit="x"),
    case("limit a float", cmixlib.run_experiment, TypeError, r"limit must be an integer or None; got float",
         name="globenc-fig5-ln-outliers", limit=2.5),
    case("setting unknown", cmixlib.run_experiment, InputError, r"has no setting\(s\) \['sigmas'\]",
         name="globenc-fig5-ln-outliers", settings={"sigmas": 2}),
    case("setting of the wrong type", cmixlib.run_experiment, InputError,
         r"Setting 'sigma' of experiment 'globenc-fig5-ln-outliers' must be a number \(default 3.0\); got str",
         name="globenc-fig5-ln-outliers", settings={"sigma": "x"}),
    case("setting list given a string", cmixlib.run_experiment, InputError,
         r"Setting 'methods' .* must be a list", name="vz-cue-alignment", settings={"methods": "alti"}),
    case("settings not a mapping", cmixlib.run_experiment, TypeError, r"settings must be a mapping",
         name="globenc-fig5-ln-outliers", settings=["sigma"]),
    case("use_cache a string", cmixlib.run_experiment, TypeError, r"use_cache must be True or False",
         name="globenc-fig5-ln-outliers", use_cache="no"),
    case("sources a string", cmixlib.run_experiment, TypeError, r"sources must be a cmixlib.experiments.Sources",
         name="globenc-fig5-ln-outliers", sources="fake"),
    case("device unknown", cmixlib.run_experiment, InputError,
         r"Unknown device 'gpu0': device must be cpu, cuda or cuda:N", name="globenc-fig5-ln-outliers",
         device="gpu0"),
    case("device an int", cmixlib.run_experiment, TypeError, r"device must be a string \(cpu, cuda or cuda:N\)",
         name="globenc-fig5-ln-outliers", device=0),
    # --- models -----------------------------------------------------------------------------------
    case("load_model name an int", cmixlib.load_model, TypeError, r"name must be a model name or local path.*int 3",
         name=3),
    case("load_model task unknown", cmixlib.load_model, InputError,
         r"Unknown task 'classification': task must be one of 'base', 'mlm', 'sequence-classification'",
         task="classification"),
    case("load_model device unknown", cmixlib.load_model, InputError, r"Unknown device 'tpu'", device="tpu"),
    case("load_model allow_fallback a string", cmixlib.load_model, TypeError, r"allow_fallback must be True or False",
         allow_fallback="no"),
    case("load_model dtype a string", cmixlib.load_model, TypeError, r"dtype must be a floating torch.dtype",
         dtype="float32"),
    case("random_model arch unknown", cmixlib.random_model, InputError,
         r"Unknown architecture 'gpt2': arch must be one of 'bert', 'roberta', 'electra', 'mpnet', 'distilbert'", arch="gpt2"),
    case("random_model layers 0", cmixlib.random_model, InputError, r"layers must be >= 1; got 0", layers=0),
    case("random_model hidden % heads", cmixlib.random_model, InputError,
         r"hidden=30 is not divisible by heads=4", hidden=30, heads=4),
    case("random_model hidden a float", cmixlib.random_model, TypeError, r"hidden must be an integer; got float",
         hidden=32.0),
    case("random_model task unknown", cmixlib.random_model, InputError, r"Unknown task 'clf'", task="clf"),
    case("random_model dtype an int", cmixlib.random_model, TypeError, r"dtype must be a floating torch.dtype",
         dtype=torch.int64),
    case("resolve_device unknown", resolve_device, InputError, r"Unknown device 'gpu0': device must be cpu, cuda",
         device="gpu0"),
    case("resolve_device an int", resolve_device, TypeError, r"device must be a string", device=1),
    # --- evaluation -------------------------------------------------------------------------------
    case("spearman lengths", st.spearman, InputError, r"length mismatch: a has 3 entries but b has 2",
         a=[1, 2, 3], b=[1, 2]),
    case("per_example_spearman counts", st.per_example_spearman, InputError,
         r"length mismatch: xs has 2 entries but ys has 1.*one per example", xs=[[1, 2], [2, 1]], ys=[[1, 2]]),
    case("spearman_to lengths", st.spearman_to, InputError, r"each scores vector has 2 entries but reference has 3",
         reference=[1, 2, 3], scores={"m": [1, 2]}),
    case("dot_product lengths", ev.dot_product, InputError, r"scores has 3 entries but cue has 2",
         scores=[1, 2, 3], cue=[0, 1]),
    case("average_precision lengths", ev.average_precision, InputError, r"scores has 3 entries but cue has 4",
         scores=[1, 2, 3], cue=[0, 1, 0, 1]),
    case("probes_needed lengths", ev.probes_needed, InputError, r"scores has 2 entries but cue has 3",
         scores=[1, 2], cue=[0, 1, 0]),
    case("probes_needed ties", ev.probes_needed, InputError, r"Unknown ties 'x': ties must be one of 'optimistic'",
         scores=[1, 2], cue=[0, 1], ties="x"),
    case("cue_alignment cue out of range", ev.cue_alignment, InputError,
         r"cue_indices=\[5\] out of range for a sequence of 3 tokens \(-3..2\)", scores=[0.1, 0.2, 0.7],
         cue_indices=[5]),
    case("cue_alignment fractional cue", ev.cue_alignment, InputError, r"cue_indices must hold integer positions",
         scores=[0.1, 0.2, 0.7], cue_indices=[1.5]),
    case("cue_alignment exclude out of range", ev.cue_alignment, InputError, r"exclude=\[3\] out of range",
         scores=[0.1, 0.2, 0.7], cue_indices=[1], exclude=[3]),
    case("cue_vector n a float", ev.cue_vector, TypeError, r"n must be an integer", n=2.5, cue_indices=[0]),
    case("normalized_ranks scheme", ev.normalized_ranks, InputError, r"Unknown scheme 'rank'", scores=[1, 2],
         scheme="rank"),
    case("special_token_rank lengths", ev.special_token_rank, InputError, r"scores has 2 entries but tokens has 1",
         scores=[1, 2], tokens=["[CLS]"]),
    case("alignment_rows row", ev.alignment_rows, InputError, r"row must be <= 2; got 3",
         maps={"m": np.ones((1, 3, 3))}, cue_indices=[0], row=3),
    # --- gradients --------------------------------------------------------------------------------
    case("grad_l2 ids >= vocab", G.grad_l2, G.GradientAttributionError, r"input_ids holds id 300", model=MLM,
         input_ids=torch.tensor([[1, 300, 4, 2]]), target=G.MLMTarget(2, 5)),
    case("grad_l2 mask shape", G.grad_l2, G.GradientAttributionError,
         r"attention_mask has shape \(1, 3\) but input_ids has shape \(1, 4\)", model=MLM,
         input_ids=torch.tensor([[1, 3, 4, 2]]), target=G.MLMTarget(2, 5), attention_mask=torch.ones(1, 3)),
    case("grad_l2 position a bool", G.grad_l2, G.GradientAttributionError, r"MLMTarget.position=True is out of range",
         model=MLM, input_ids=torch.tensor([[1, 3, 4, 2]]), target=G.MLMTarget(True, 5)),
    case("blank_out batch_size 0", G.blank_out, G.GradientAttributionError, r"batch_size must be >= 1; got 0",
         model=MLM, input_ids=torch.tensor([[1, 3, 4, 2]]), target=G.MLMTarget(2, 5), replacement=3, batch_size=0),
    case("random_scores n 0", G.random_scores, G.GradientAttributionError, r"n must be >= 1; got 0", n=0),
    case("random_scores n a float", G.random_scores, TypeError, r"n must be an integer; got float", n=2.5),
]


def resolve(value, objects, request):
    if isinstance(value, E):
        return objects[value] if value in objects else request.getfixturevalue(value)
    return value


@pytest.mark.parametrize("entry, kwargs, error, pattern", CASES)
def test_bad_input_raises_a_clear_error(entry, kwargs, error, pattern, objects, request):
    kwargs = {k: resolve(v, objects, request) for k, v in kwargs.items()}
    with pytest.raises(error, match=pattern) as info:
        entry(**kwargs)
    assert "\n" not in str(info.value)
    if error is TypeError:        # ours, not one from inside torch or Python
        assert not isinstance(info.value, ValueError)


def test_cmix_device_names_the_variable(monkeypatch):
    monkeypatch.setenv("CMIX_DEVICE", "gpu0")
    with pytest.raises(InputError, match=r"Unknown device 'gpu0': \$CMIX_DEVICE must be cpu, cuda or cuda:N"):
        default_device()
    with pytest.raises(InputError, match=r"\$CMIX_DEVICE"):    # before any work, even on a cache hit
        cmixlib.run_experiment("globenc-fig5-ln-outliers")


@pytest.mark.parametrize("argv, env, message", [
    (["run", "no-such"], None, r"cmix: Unknown experiment 'no-such': name must be one of"),
    (["run", "globenc-fig5-ln-outliers", "--limit", "-3"], None, r"cmix: limit must be >= 1; got -3\."),
    (["run", "globenc-fig5-ln-outliers", "--set", "sigma=x"], None, r"cmix: Setting 'sigma'"),
    (["run", "globenc-fig5-ln-outliers", "--device", "gpu0"], None, r"cmix: Unknown device 'gpu0'"),
    (["run", "globenc-fig5-ln-outliers"], "gpu0", r"cmix: Unknown device 'gpu0': \$CMIX_DEVICE must be"),
    (["prewarm", "--jobs", "0"], None, r"cmix: --jobs must be >= 1; got 0\."),
])
def test_cli_turns_bad_input_into_one_line_and_status_2(argv, env, message, monkeypatch, capsys):
    if env:
        monkeypatch.setenv("CMIX_DEVICE", env)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert re.match(message, err), err


def test_input_error_is_still_where_it_was():
    assert cmixlib.InputError is cmixlib.methods.dispatch.InputError is cmixlib.validation.InputError
    assert issubclass(InputError, ValueError) and issubclass(G.GradientAttributionError, InputError)


# ------------------------------------------------------------------------------------------------
# Valid edge inputs keep working, with the same results
# ------------------------------------------------------------------------------------------------
LAYER = ["attn_norm_res_ln", "alti_layer"]


def test_rows_as_array_tensor_scalar_and_repeats_give_the_same_maps(objects):
    model = objects["model"]
    want = cm(model, None, IDS, LAYER, rows=[1, 3])
    for rows in (np.array([3, 1]), torch.tensor([1, 3]), (3, 1, 3), np.array([1, 3], dtype=np.int32)):
        got = cm(model, None, IDS, LAYER, rows=rows)
        for m in LAYER:
            np.testing.assert_array_equal(got[m], want[m])
    nested = cm(model, None, IDS, LAYER, rows=[[3, 1]])          # one sentence, its own rows
    np.testing.assert_array_equal(nested["alti_layer"], want["alti_layer"])
    one = cm(model, None, IDS, LAYER, rows=np.int64(2))
    np.testing.assert_array_equal(one["alti_layer"], cm(model, None, IDS, LAYER, rows=[2])["alti_layer"])
    full = cm(model, None, IDS, LAYER)
    np.testing.assert_allclose(want["alti_layer"][:, [1, 3]], full["alti_layer"][:, [1, 3]], rtol=1e-5, atol=1e-7)


def test_id_and_mask_forms_give_the_same_maps(objects):
    model = objects["model"]
    want = cm(model, None, IDS, LAYER)
    forms = [{"input_ids": [1, 5, 6, 7, 2]},                                  # a 1-D list
             {"input_ids": np.array([1, 5, 6, 7, 2])},
             {"input_ids": torch.tensor([1, 5, 6, 7, 2], dtype=torch.int32),
              "attention_mask": torch.ones(5, dtype=torch.bool)},
             {"input_ids": [[1, 5, 6, 7, 2]], "attention_mask": [[1.0, 1.0, 1.0, 1.0, 1.0]]}]
    for text in forms:
        got = cm(model, None, text, LAYER)
        for m in LAYER:
            np.testing.assert_array_equal(got[m], want[m])


def test_bundle_without_tokenizer_and_per_sentence_rows(objects):
    bundle = cmixlib.ModelBundle(model=objects["model"], tokenizer=None, requested="r", source="r", name="r")
    maps = cm(bundle, None, BATCH, LAYER, rows=[[1], None])
    assert isinstance(maps, list) and len(maps) == 2
    assert np.isnan(maps[0]["alti_layer"][:, 0]).all() and not np.isnan(maps[1]["alti_layer"]).any()
    ratio = cmr(bundle, None, {"input_ids": [1, 5, 6, 2]})
    assert ratio.shape == (1, 4)


def test_vz_standardize_pair_and_true(objects):
    model = objects["model"]
    for stdz in (True, (np.zeros(32), np.ones(32)), (torch.zeros(32), torch.ones(32))):
        maps = cm(model, None, IDS, [cmixlib.ValueZeroing(standardize=stdz)])
        assert np.isfinite(maps["value_zeroing"]).all()
    plain = cm(model, None, IDS, ["value_zeroing"])["value_zeroing"]
    same = cm(model, None, IDS, [cmixlib.ValueZeroing(standardize=(np.zeros(32), np.ones(32)))]
              )["value_zeroing"]
    np.testing.assert_allclose(plain, same, rtol=1e-6)


def test_raw_text_forms(packaged_tokenizer):
    model = cmixlib.random_model("bert", layers=1, vocab=packaged_tokenizer.vocab_size)
    one = cm(model, packaged_tokenizer, "the keys are here", ["attention"])
    for batch in (("the keys are here", "a cat"), np.array(["the keys are here", "a cat"])):
        maps = cm(model, packaged_tokenizer, batch, ("attention",))
        np.testing.assert_allclose(maps[0]["attention"], one["attention"], rtol=1e-5, atol=1e-7)
    ids = packaged_tokenizer("the keys")["input_ids"]
    assert cmixlib.tokens(packaged_tokenizer, ids) == cmixlib.tokens(packaged_tokenizer, torch.tensor([ids]))


def test_aggregation_accepts_lists_tensors_and_nan_rows():
    a = np.array([[[0.5, 0.5], [0.0, 1.0]], [[1.0, 0.0], [0.5, 0.5]]])
    np.testing.assert_array_equal(cmixlib.rollout(a.tolist()), cmixlib.rollout(a))
    np.testing.assert_array_equal(cmixlib.rollout(torch.tensor(a)), cmixlib.rollout(a))
    np.testing.assert_array_equal(cmixlib.attention_flow(a, rows=np.array([1])),
                                  cmixlib.attention_flow(a, rows=[1]))
    rows = cmixlib.normalize_rows([[1, 3], [np.nan, np.nan], [0, 0]])
    np.testing.assert_array_equal(rows[0], [0.25, 0.75])
    assert np.isnan(rows[1]).all() and (rows[2] == 0).all()
    tiny = a.copy()
    tiny[0, 0, 1] = -1e-9                          # rounding below zero is not an error
    cmixlib.rollout(tiny)


def test_runs_and_devices_accept_their_valid_forms():
    exp = cmixlib.experiments.REGISTRY["globenc-fig5-ln-outliers"]
    assert runner._check_settings(exp, {"sigma": 3, "outliers": "union"}) == {"sigma": 3, "outliers": "union"}
    assert runner._check_settings(exp, {"sigma": None}) == {"sigma": None}
    assert resolve_device(" CPU ") == resolve_device(torch.device("cpu")) == torch.device("cpu")
    assert cmixlib.random_model("distilbert", layers=1, hidden=8, heads=2, seed=-1).config.dim == 8
    assert ev.cue_alignment([0.1, 0.2, 0.7], [np.int64(-1)], exclude=[0])["dot"] == pytest.approx(0.7 / 0.9)
    assert G.random_scores(np.int64(3), seed=None).shape == (3,)


def test_a_model_in_training_mode_is_refused():
    model = cmixlib.random_model("bert", layers=1).train()
    with pytest.raises(cmixlib.InputError, match=r"model is in training mode.*model\.eval\(\)"):
        cmixlib.context_mixing(model, None, {"input_ids": [[1, 5, 6, 2]]})
    model.eval()
    assert cmixlib.context_mixing(model, None, {"input_ids": [[1, 5, 6, 2]]}, "attention")
