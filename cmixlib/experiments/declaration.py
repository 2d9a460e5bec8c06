"""An experiment declared as data (:class:`Experiment`) and the registry of them
(:data:`REGISTRY`, :func:`register`); :mod:`cmixlib.experiments.runner` runs them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import pandas as pd

from cmixlib.experiments.sources import Inputs

__all__ = ["Experiment", "REGISTRY", "register", "Frames"]

#: What a ``compute`` returns: ``{frame_name: DataFrame}`` (the frame ``"result"`` is required).
Frames = Mapping[str, pd.DataFrame]


@dataclass
class Experiment:
    """One experiment, declared as data.

    ``compute(ctx) -> {frame_name: DataFrame}`` does the work, ``ctx`` a
    :class:`~cmixlib.experiments.runner.Context` (the frame ``"result"`` is
    required; its docstring is the exact recipe, kept as ``description``). ``defaults``: every
    setting and its default (a run may override only these). ``inputs``: the model and examples
    it reads (:class:`cmixlib.experiments.sources.Inputs`, or one per task for experiments run on
    several tasks), loaded through the run's :class:`~cmixlib.experiments.sources.Sources` by
    :meth:`~cmixlib.experiments.runner.Context.load_inputs`. ``paper_numbers()``: the published numbers it is compared with
    (quotes from :mod:`cmixlib.data.paper_numbers`); ``compare(frames, paper)``: ours beside them;
    ``summary(frames)``: a compact text view.
    """

    name: str
    title: str
    paper: str
    compute: Callable[[Any], Frames]
    defaults: dict = field(default_factory=dict)
    inputs: Inputs | Mapping[str, Inputs] | None = None
    paper_numbers: Callable[[], pd.DataFrame] | None = None
    compare: Callable[[Frames, pd.DataFrame], pd.DataFrame] | None = None
    summary: Callable[[Frames], str] | None = None
    description: str = ""

    def __post_init__(self):
        self.defaults = dict(self.defaults)
        self.description = self.description or (self.compute.__doc__ or "").strip()

    @property
    def needs(self) -> str:
        """The declared inputs, in words."""
        if isinstance(self.inputs, Mapping):
            return "; ".join(f"{task}: {inp}" for task, inp in self.inputs.items())
        return str(self.inputs) if self.inputs is not None else ""


#: Every registered experiment by name, in registration order (``cmix list``).
REGISTRY: dict[str, Experiment] = {}


def register(experiment: Experiment | str, **declaration):
    """Add an :class:`Experiment` to :data:`REGISTRY` (and return it).

    Also a decorator, ``@register(name, title=..., paper=..., defaults=..., ...)`` over
    ``compute(ctx)``, for an experiment declared next to its function (e.g. in a notebook)."""
    if isinstance(experiment, Experiment):
        REGISTRY[experiment.name] = experiment
        return experiment

    def deco(compute):
        register(Experiment(name=experiment, compute=compute, **declaration))
        return compute
    return deco
