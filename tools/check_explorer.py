#!/usr/bin/env python3
"""Check the static explorer (cmixlib/plotting/explorer.py) in headless Chromium.

Opens a page holding the explorer with ``#cmix-explorer-selftest`` (no network: a ``file://``
URL, background networking off). The page's viewer then drives its own controls with the events
a user's clicks fire: every sentence x method, the layer slider, the rollout toggle, the row
view, the comparison and a hover, hashing the canvas pixels after each step. This script reads
those hashes from the final DOM and checks them against the data embedded in the page:

- for every sentence, every method was drawn, and two methods give the same picture exactly
  when their maps (as stored) and their colours are equal;
- moving the layer slider, toggling the rollout and choosing a row change the picture when the
  data differ, toggling back restores it, and the comparison draws a second picture;
- the hover readout names the right tokens and the stored value of that cell.

Usage: ``python tools/check_explorer.py [PAGE.html ...]`` (default: the built chapter 15).
Exit status 0 when every check passes.
"""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_PAGE = Path("_build/html/notebooks/15_explore.html")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--disable-default-apps", "--mute-audio", "--disable-dev-shm-usage", "--hide-scrollbars"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def page_data(text: str, element_id: str = "cmix-explorer") -> dict:
    m = re.search(rf'<script type="application/json" id="{element_id}-data">(.*?)</script>', text, re.S)
    if not m:
        raise ValueError("no explorer data in the page")
    return json.loads(m.group(1).replace("<\\/", "</"))


def run_selftest(page: Path, timeout: int = 120, element_id: str = "cmix-explorer") -> dict:
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium found (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="cmix-chrome-") as profile:
        dom = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=30000",
                              "--dump-dom", page.resolve().as_uri() + "#cmix-explorer-selftest"],
                             capture_output=True, text=True, timeout=timeout).stdout
    m = re.search(rf'<pre id="{element_id}-selftest"[^>]*>(.*?)</pre>', dom, re.S)
    if not m:
        raise RuntimeError("the explorer's self-test wrote nothing: the viewer did not run")
    return json.loads(html.unescape(m.group(1)))


def check_results(data: dict, res: dict) -> list[str]:
    """The checks of the module docstring; returns the problems found."""
    errors: list[str] = []
    L = data["layers"]
    names = [m["name"] for m in data["methods"]]
    colour = {m["name"]: m["colour"] for m in data["methods"]}
    scale = 10 ** data["decimals"]
    states = {(s["sentence"], s["method"]): s for s in res["states"]}
    for k, sent in enumerate(data["sentences"]):
        for a in names:
            if (k, a) not in states:
                errors.append(f"sentence {k + 1}, {a}: not drawn")
                continue
            for b in names[names.index(a) + 1:]:
                if (k, b) not in states:
                    continue
                # a method's colour is part of its picture: equal pictures need equal colours too
                same_data = (sent["maps"][a][L - 1] == sent["maps"][b][L - 1]
                             and colour[a] == colour[b])
                same_pic = states[(k, a)]["hash"] == states[(k, b)]["hash"]
                if same_data != same_pic:
                    errors.append(f"sentence {k + 1}: {a} vs {b}: maps {'equal' if same_data else 'differ'} "
                                  f"but pictures {'equal' if same_pic else 'differ'}")
    steps = {s["what"]: s for s in res["steps"]}
    maps0 = data["sentences"][0]["maps"]

    def expect_change(before: str, after: str, differ: bool, what: str) -> None:
        changed = steps[before]["hash"] != steps[after]["hash"]
        if changed != differ:
            errors.append(f"{what}: picture {'changed' if changed else 'unchanged'}, data "
                          f"{'differ' if differ else 'equal'}")

    vz, roll = "value_zeroing", steps["rollout on"]["method"]
    expect_change("start", "layer 1", maps0[vz][L - 1] != maps0[vz][0], "layer slider")
    if roll == vz:
        errors.append("rollout toggle: the method did not switch to its rollout")
    else:
        expect_change("layer 1", "rollout on",
                      maps0[vz][0] != maps0[roll][0] or colour[vz] != colour[roll], "rollout toggle")
    if steps["rollout off"]["hash"] != steps["layer 1"]["hash"]:
        errors.append("rollout toggle: switching back did not restore the picture")
    expect_change("rollout off", "row 1", True, "row view")
    cmp = steps["compare alti"]
    same = maps0["alti"][0] == maps0[vz][0] and colour["alti"] == colour[vz]
    if not cmp["hash_b"] or (cmp["hash_b"] == cmp["hash"]) != same:
        errors.append("comparison: the second picture is missing or wrong")
    toks = data["sentences"][0]["tokens"]
    want = f"layer 1: {toks[1]} \u2190 {toks[2]} = {maps0[vz][0][1][2] / scale:.{data['decimals']}f}"
    if want not in steps["hover cell 1,2"]["readout"]:
        errors.append(f"hover readout {steps['hover cell 1,2']['readout']!r}, expected {want!r}")
    return errors


def check_page(page: Path) -> list[str]:
    data = page_data(page.read_text(encoding="utf-8"))
    try:
        res = run_selftest(page)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return [f"{page}: {exc}"]
    errs = [f"{page}: {e}" for e in check_results(data, res)]
    print(f"  {page}: explorer self-test, {len(res['states'])} sentence x method pictures and "
          f"{len(res['steps'])} control steps checked" + ("" if not errs else f", {len(errs)} problem(s)"))
    return errs


def main(argv: list[str] | None = None) -> int:
    pages = [Path(a) for a in (argv if argv is not None else sys.argv[1:])] or [DEFAULT_PAGE]
    errors: list[str] = []
    for page in pages:
        errors += check_page(page)
    for e in errors:
        print("ERROR:", e)
    print(f"check_explorer: {'OK' if not errors else f'{len(errors)} problem(s)'}")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
