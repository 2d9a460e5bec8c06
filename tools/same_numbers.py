"""Same numbers before and after a change: every book run's frames, in quick mode.

::

    python tools/same_numbers.py dump OUT [--cache DIR]   # every book run, quick sizes
    python tools/same_numbers.py compare BEFORE AFTER     # bitwise, else the largest difference

``dump`` runs each call of the book's run table (``book_calls``) in quick mode (2 examples,
small classifiers trained in the run) into a fresh result cache and writes each result's frames
to ``OUT/<run>__<condition>/<frame>.pkl``. ``compare`` reads two dumps and reports, per frame,
``equal`` (bitwise, values and labels), or the largest absolute difference of its numbers, or
what differs in shape, columns or text. The exit status is 1 when any frame is not bitwise
equal or is missing on one side. This is how a refactor shows it kept the book's numbers (the
redesign of cmixlib, issue 41).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def _book_runs():
    try:
        from cmixlib.book import runs
    except ImportError:  # before the redesign
        from cmixlib import book_runs as runs
    return runs


def dump(out: Path, cache: Path | None) -> None:
    os.environ["CMIX_QUICK"] = "1"
    os.environ["CMIX_CACHE"] = str(cache or tempfile.mkdtemp(prefix="cmix-same-"))
    runs = _book_runs()
    out.mkdir(parents=True, exist_ok=True)
    calls = runs.book_calls()
    for i, (name, cond) in enumerate(calls, 1):
        t = time.time()
        res = runs.run(name, cond)
        folder = out / f"{name}__{cond}"
        folder.mkdir(exist_ok=True)
        for key, frame in res.frames.items():
            frame.to_pickle(folder / f"{key}.pkl")
        print(f"[{i}/{len(calls)}] {name} {cond}: {len(res.frames)} frames, "
              f"{time.time() - t:.0f} s", flush=True)


def _differ(a, b) -> str | None:
    import numpy as np
    import pandas as pd

    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    if list(map(str, a.columns)) != list(map(str, b.columns)):
        return f"columns {list(a.columns)} vs {list(b.columns)}"
    try:
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        return None
    except AssertionError:
        pass
    worst, where = 0.0, None
    for col in a.columns:
        x, y = a[col], b[col]
        if pd.api.types.is_numeric_dtype(x) and pd.api.types.is_numeric_dtype(y):
            d = np.nanmax(np.abs(x.to_numpy(float) - y.to_numpy(float)), initial=0.0)
            both_nan = (x.isna() == y.isna()).all()
            if not both_nan:
                return f"column {col!r}: missing values differ"
            if d > worst:
                worst, where = float(d), col
        elif not x.astype(str).equals(y.astype(str)):
            return f"column {col!r}: text differs"
    return f"max |difference| {worst:.3g} (column {where!r})" if where else "labels differ"


def compare(before: Path, after: Path) -> int:
    import pandas as pd

    bad = 0
    names = sorted({p.relative_to(before) for p in before.rglob("*.pkl")}
                   | {p.relative_to(after) for p in after.rglob("*.pkl")})
    for rel in names:
        a, b = before / rel, after / rel
        if not (a.exists() and b.exists()):
            print(f"MISSING  {rel} ({'after' if a.exists() else 'before'})")
            bad += 1
            continue
        why = _differ(pd.read_pickle(a), pd.read_pickle(b))
        print(f"{'equal   ' if why is None else 'DIFFERS '} {rel}" + (f": {why}" if why else ""))
        bad += why is not None
    print(f"{len(names) - bad} of {len(names)} frames bitwise equal")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--cache", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "dump":
        dump(args.out, args.cache)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
