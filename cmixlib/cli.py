"""Console command ``cmix``: list and run the registered experiments.

::

    cmix list
    cmix run EXPERIMENT [--model M] [--limit N] [--out DIR] [--set KEY=VALUE ...] [--no-cache] [--quiet]
    cmix prewarm [--jobs N]
    cmix editions [--check]
    cmix grade SUBMISSION... [--out DIR] [--assignment NB] [--quick] [--seed N] ...

``editions`` and ``grade`` are the coursework commands of the separate package ``cmix_course``
(installed with cmixlib; also ``python -m cmix_course``): this module only hands them over.

``--set`` overrides one setting; VALUE is parsed as JSON when possible (``--set exclude=special``,
``--set methods='["alti","attention"]'``, ``--set ig_steps=10``). The result files are written to the
cache folder (printed) and, with ``--out``, copied to DIR. A table places our numbers beside the
paper's, naming both models and the data size.
"""
from __future__ import annotations

import argparse
import json
import sys

import pandas as pd

from cmixlib import experiments as X
from cmixlib.book.runs import prewarm
from cmixlib.validation import InputError, check_positive_int


def _parse_set(items: list[str]) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"--set expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


def _print_list() -> None:
    df = X.list_experiments()
    if df.empty:
        print("No experiments registered.")
        return
    w = max(len(n) for n in df["name"])
    for row in df.itertuples(index=False):
        print(f"{row.name:<{w}}  {row.paper:<38}  {row.title}")


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if pd.isna(v) else f"{v:.3f}"
    return str(v)


def format_run(res: "X.RunResult", max_rows: int = 60) -> str:
    """Header (experiment, model, data size, settings, cache state) + comparison or result table."""
    m = res.meta
    lines = [f"{m['experiment']}: {m['title']}  [{m['paper']}]",
             f"model: {m['model']}" + (f"   device: {m['device']}" if m.get("device") else ""),
             f"data size: {m['data_size']}   limit: {m['limit']}   code version: {m['code_version']}",
             f"settings: {json.dumps(m['settings'], sort_keys=True)}",
             f"wall time: {m['wall_time_s']} s ({'from cache' if res.from_cache else 'computed'})",
             f"files: {res.directory}"]
    for note in m.get("notes", []):
        lines.append(f"note: {note}")
    comp = res.comparison()
    with pd.option_context("display.max_rows", max_rows, "display.width", 160, "display.max_columns", 20):
        if comp is not None and len(comp):
            pmodels = ", ".join(sorted(set(str(x) for x in comp.get("paper_model", pd.Series(dtype=str)).dropna())))
            lines.append(f"ours ({m['model']}) beside the paper's numbers ({pmodels}); paper values are quotes:")
            lines.append(comp.to_string(index=False, float_format=_fmt))
        else:
            summ = res.summary()
            lines.append(summ if summ else res.result.to_string(index=False, float_format=_fmt))
            if res.paper is None:
                lines.append("(no published numbers to compare with: the paper shows this as a figure only)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cmix", description="Context-mixing experiments (cmixlib).")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the registered experiments")
    run = sub.add_parser("run", help="run one experiment (cached)")
    run.add_argument("experiment")
    run.add_argument("--model", default=None, help="model name or path (default: $CMIX_MODEL or bert-base-uncased)")
    run.add_argument("--limit", type=int, default=None, help="use only the first N examples")
    run.add_argument("--out", default=None, help="also copy the result files to this folder")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a setting")
    run.add_argument("--no-cache", action="store_true", help="recompute even if cached")
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.add_argument("--device", default=None,
                     help="cpu, cuda or cuda:N (default: $CMIX_DEVICE, else CUDA when available)")
    warm = sub.add_parser("prewarm", help="compute every run of the book into the result cache")
    warm.add_argument("--jobs", type=int, default=2, help="groups of runs side by side (default 2)")
    try:                                    # the coursework package's commands
        from cmix_course.cli import add_editions, add_grade
    except ImportError:                     # pragma: no cover - cmixlib installed without it
        pass
    else:
        add_editions(sub)
        add_grade(sub)
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except InputError as exc:               # a bad argument, option or $CMIX_DEVICE: one line, status 2
        print(f"cmix: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (a KeyError's without its quotes)."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
    return " ".join(str(text).split())


def _dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command; an :class:`~cmixlib.InputError` propagates to :func:`main`."""
    if args.command in ("editions", "grade"):
        from cmix_course.cli import dispatch

        return dispatch(args)
    if args.command == "list":
        _print_list()
        return 0
    if args.command == "prewarm":
        total = sum(seconds for _, seconds in prewarm(check_positive_int(args.jobs, "--jobs")))
        print(f"prewarm: every book run is in the result cache ({total:.0f} s of run time)")
        return 0
    try:
        res = X.run_experiment(args.experiment, model=args.model, limit=args.limit,
                               settings=_parse_set(args.set), out=args.out,
                               use_cache=not args.no_cache, progress=not args.quiet,
                               device=args.device)
    except KeyError as exc:                 # e.g. a missing dataset file named in a run's settings
        print(f"cmix: {_one_line(exc)}", file=sys.stderr)
        return 2
    print(format_run(res))
    if args.out:
        print(f"copied to: {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
