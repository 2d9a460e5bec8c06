#!/usr/bin/env python3
"""Check the static explorer (cmixlib/plotting/explorer.py) in headless Chromium.

Opens a page holding the explorer with ``#cmix-explorer-selftest`` (no network: a ``file://``
URL, background networking off). The page's viewer then drives its own controls with the events
a user's clicks, taps and pointer moves fire, hashing the canvas pixels and recording the numbers
it drew after each step. This script reads that record from the final DOM and checks it against
the data embedded in the page:

- every model's controls: the layer slider's range, the methods offered (the model's methods
  and baselines, no other), the heads, the model's note;
- for every model and sentence drawn, every method drew exactly its stored map (or baseline row),
  and two methods give the same picture exactly when their maps and colours are equal;
- the layer slider, the rollout toggle and the row view change the picture when the data differ,
  toggling back restores it, and a comparison draws a second picture;
- colour bars: each panel's bar runs from 0 to its map's maximum; with the shared scale on, both
  run to the larger maximum and a panel's picture changes exactly when its maximum was smaller;
  switching it off restores both pictures;
- the difference panel drew A - B of the stored maps, with a symmetric bar of the largest |A - B|;
- the minimal-pair panel drew the pair's stored map, pixel for pixel the picture of that sentence;
- a head drew that head's stored attention, the head mean the attention map;
- a baseline drew its stored row (no colour bar), and the pointer readout gives its score;
- mouse, touch and pen pointer events read the right tokens and values;
- switching the model draws that model's data and names it;
- canvases are backed by devicePixelRatio x their CSS size (high-DPI screens).

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
    """The explorer's data stored in a page (inflated when stored deflated)."""
    m = re.search(rf'<script type="application/json" id="{element_id}-data">(.*?)</script>',
                  text, re.S)
    if not m:
        raise ValueError("no explorer data in the page")
    raw = json.loads(m.group(1).replace("<\\/", "</"))
    if raw.get("encoding") == "deflate+base64":
        import base64
        import zlib
        return json.loads(zlib.decompress(base64.b64decode(raw["payload"])).decode("utf-8"))
    return raw


def run_selftest(page: Path, timeout: int = 180, element_id: str = "cmix-explorer",
                 scale_factor: float | None = None) -> dict:
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError("no chromium found (Debian: apt-get install chromium)")
    extra = [f"--force-device-scale-factor={scale_factor}"] if scale_factor else []
    with tempfile.TemporaryDirectory(prefix="cmix-chrome-") as profile:
        dom = subprocess.run([exe, *FLAGS, *extra, f"--user-data-dir={profile}",
                              "--virtual-time-budget=60000", "--dump-dom",
                              page.resolve().as_uri() + "#cmix-explorer-selftest"],
                             capture_output=True, text=True, timeout=timeout).stdout
    m = re.search(rf'<pre id="{element_id}-selftest"[^>]*>(.*?)</pre>', dom, re.S)
    if not m:
        raise RuntimeError("the explorer's self-test wrote nothing: the viewer did not run")
    return json.loads(html.unescape(m.group(1)))


def _max(m) -> int:
    return max(max(r) for r in m)


def _colours(m, colour: str, scale: int) -> list:
    """The viewer's colour of each cell of stored map ``m`` (explorer.js ``shade``: white to
    ``colour`` in proportion to value / the map's maximum; grey where not computed), computed
    with the same double-precision operations and rounding (Math.round: half up)."""
    import math

    col = [int(colour[k:k + 2], 16) for k in (1, 3, 5)]
    vmax = _max(m) / scale

    def shade(v):
        f = max(0.0, min(1.0, (v / scale) / vmax if vmax > 0 else 0.0))
        return tuple(math.floor(255 + (c - 255) * f + 0.5) for c in col)

    return [[None if v < 0 else shade(v) for v in r] for r in m]


def _diff(a, b):
    return [[None if x < 0 or y < 0 else x - y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def check_results(data: dict, res: dict) -> list[str]:
    """The checks of the module docstring; returns the problems found."""
    errors: list[str] = []
    scale, dec = 10 ** data["decimals"], data["decimals"]
    colour = {m["name"]: m["colour"] for m in data["methods"]}
    blocks = data["models"]
    for mk, (b, got) in enumerate(zip(blocks, res["models"])):
        want = b["methods"] + b.get("baseline_methods", [])
        if got["methods"] != want:
            errors.append(f"model {mk}: methods offered {got['methods']}, expected {want}")
        if got["layer_max"] != b["layers"] or got["heads"] != b["heads"]:
            errors.append(f"model {mk}: layer slider / heads do not match the data")
        if b["model"] not in got["info"] or (got["note"] or None) != b["note"]:
            errors.append(f"model {mk}: model name or note not shown as stored")
    if len(res["models"]) != len(blocks):
        errors.append("not every model was shown")

    def stored(mk, k, name, layer, head=0):
        s = blocks[mk]["sentences"][k]
        if name in blocks[mk].get("baseline_methods", []):
            return ("row", s["baselines"]["rows"][name]) if "baselines" in s else None
        return ("map", s["heads"][layer - 1][head - 1] if head else s["maps"][name][layer - 1])

    states = {}
    for st in res["states"]:
        key = (st["model"], st["sentence"], st["method"])
        states[key] = st
        want = stored(*key, st["layer"])
        got = st["drawn"] and (st["drawn"]["kind"], st["drawn"]["ints"])
        if want != (got or None):
            errors.append(f"model {key[0]} sentence {key[1] + 1} {key[2]}: drew other numbers "
                          "than stored")
    for (mk, k, a), sa in states.items():
        for (mk2, k2, b_), sb in states.items():
            if (mk2, k2) != (mk, k) or b_ <= a:
                continue
            da, db = stored(mk, k, a, sa["layer"]), stored(mk, k, b_, sb["layer"])
            if da is None or db is None or da[0] != db[0]:
                continue
            if da[0] == "map":     # the colours the viewer computes, cell by cell
                same_data = _colours(da[1], colour[a], scale) == _colours(db[1], colour[b_], scale)
            else:
                same_data = da == db and colour[a] == colour[b_]
            if same_data != (sa["hash"] == sb["hash"]):
                errors.append(f"model {mk} sentence {k + 1}: {a} vs {b_}: colours "
                              f"{'equal' if same_data else 'differ'} but pictures "
                              f"{'equal' if not same_data else 'differ'}")
    steps = {s["what"]: s for s in res["steps"]}
    b0 = blocks[0]
    maps0 = b0["sentences"][0]["maps"]
    L = b0["layers"]

    def expect_change(before: str, after: str, differ: bool, what: str, key="hash") -> None:
        changed = steps[before][key] != steps[after][key]
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
    a1, b1 = maps0[vz][0], maps0["alti"][0]
    same = a1 == b1 and colour["alti"] == colour[vz]
    if not cmp["hash_b"] or (cmp["hash_b"] == cmp["hash"]) != same:
        errors.append("comparison: the second picture is missing or wrong")
    if not (cmp["bar_shown"] and cmp["bar_b_shown"]):
        errors.append("colour bar: missing beside a map")
    elif (cmp["bar"]["lo"], cmp["bar"]["hi"]) != (0, _max(a1) / scale) or \
            (cmp["bar_b"]["lo"], cmp["bar_b"]["hi"]) != (0, _max(b1) / scale):
        errors.append(f"colour bar: per-panel ranges {cmp['bar']}, {cmp['bar_b']}, expected "
                      f"0..{_max(a1) / scale} and 0..{_max(b1) / scale}")
    toks = b0["sentences"][0]["tokens"]
    for what, (i, j), kind in (("pointer mouse 1,2", (1, 2), "mouse"),
                               ("pointer touch 2,1", (2, 1), "touch")):
        want = f"layer 1: {toks[i]} \u2190 {toks[j]} = {a1[i][j] / scale:.{dec}f} ({kind})"
        if want not in steps[what]["readout"]:
            errors.append(f"{what}: readout {steps[what]['readout']!r}, expected {want!r}")
    sh, top = steps["shared on"], max(_max(a1), _max(b1)) / scale
    if (sh["bar"]["hi"], sh["bar_b"]["hi"]) != (top, top):
        errors.append(f"shared scale: bars end at {sh['bar']['hi']}, {sh['bar_b']['hi']}, "
                      f"expected {top}")
    expect_change("compare alti", "shared on", _max(a1) / scale < top, "shared scale (panel A)")
    expect_change("compare alti", "shared on", _max(b1) / scale < top, "shared scale (panel B)",
                  "hash_b")
    if (steps["shared off"]["hash"], steps["shared off"]["hash_b"]) != (cmp["hash"], cmp["hash_b"]):
        errors.append("shared scale: switching it off did not restore the pictures")
    d = steps["difference"]
    want = _diff(a1, b1)
    if not d["drawn_b"] or d["drawn_b"]["kind"] != "diff" or d["drawn_b"]["ints"] != want:
        errors.append("difference map: the values drawn are not A - B of the stored maps")
    else:
        amax = max(abs(v) for r in want for v in r if v is not None) / scale or 1 / scale
        if (d["bar_b"]["lo"], d["bar_b"]["hi"]) != (-amax, amax):
            errors.append(f"difference map: colour bar {d['bar_b']}, expected +-{amax}")
    want_r = f"= {want[1][2] / scale:.{dec}f} (pen)"
    if want_r not in steps["difference pointer 1,2"]["readout"]:
        errors.append(f"difference readout {steps['difference pointer 1,2']['readout']!r}, "
                      f"expected {want_r!r}")
    if "pair" in steps:
        p = steps["pair"]
        other = b0["sentences"][p["sentence"]]["pair"]
        if not p["drawn_b"] or p["drawn_b"]["ints"] != \
                b0["sentences"][other]["maps"][p["method"]][p["layer"] - 1]:
            errors.append("minimal pair: the second panel is not the pair's map")
        elif (0, other, p["method"]) in states and \
                states[(0, other, p["method"])]["hash"] != p["hash_b"]:
            errors.append("minimal pair: the pair's picture differs from that sentence's own")
    else:
        errors.append("minimal pair: no BLiMP pair in the data")
    h1, hm = steps["head last"], steps["head mean"]
    heads = b0["sentences"][0]["heads"][h1["layer"] - 1]
    if h1["head"] != b0["heads"] or h1["drawn"]["ints"] != heads[-1] or \
            hm["drawn"]["ints"] != maps0["attention"][h1["layer"] - 1]:
        errors.append("per-head view: the last head or the head mean drew other numbers than "
                      "stored")
    expect_change("head last", "head mean", heads[-1] != maps0["attention"][h1["layer"] - 1],
                  "per-head view")
    if b0.get("baseline_methods"):
        bs = steps["baseline"]
        sb = b0["sentences"][bs["sentence"]]["baselines"]
        if not bs["drawn"] or bs["drawn"]["ints"] != sb["rows"][bs["method"]] or bs["bar_shown"]:
            errors.append("baseline: the row drawn is not the stored row (or a colour bar shows)")
        v = sb["rows"][bs["method"]][1] / scale
        if f"= {v:.{dec}f} \u00d7" not in steps["baseline pointer 1"]["readout"]:
            errors.append(f"baseline readout {steps['baseline pointer 1']['readout']!r}, "
                          f"expected {v:.{dec}f} x the row's scale")
    for mk, b in enumerate(blocks):
        st = steps.get(f"model {mk}")
        want = b["sentences"][0]["maps"][b["methods"][0]][st["layer"] - 1] if st else None
        if not st or st["drawn"]["ints"] != want or b["model"] not in st["readout"] + \
                json.dumps(res["models"][mk]["info"]):
            errors.append(f"model switch to {b['model']}: not drawn from that model's data")
    dpr = res["dpr"]
    for s in res["steps"]:
        if [round(c * dpr) for c in s["css"]] != s["backing"]:
            errors.append(f"{s['what']}: canvas backing {s['backing']} is not "
                          f"devicePixelRatio {dpr} x CSS size {s['css']}")
            break
    return errors


def check_page(page: Path, scale_factor: float | None = None) -> list[str]:
    data = page_data(page.read_text(encoding="utf-8"))
    try:
        res = run_selftest(page, scale_factor=scale_factor)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return [f"{page}: {exc}"]
    errs = [f"{page}: {e}" for e in check_results(data, res)]
    print(f"  {page}: explorer self-test at device-pixel ratio {res['dpr']}, "
          f"{len(res['models'])} models, {len(res['states'])} model x sentence x method pictures "
          f"and {len(res['steps'])} control steps checked"
          + ("" if not errs else f", {len(errs)} problem(s)"))
    return errs


def main(argv: list[str] | None = None) -> int:
    pages = [Path(a) for a in (argv if argv is not None else sys.argv[1:])] or [DEFAULT_PAGE]
    errors: list[str] = []
    for page in pages:
        errors += check_page(page)
        errors += check_page(page, scale_factor=2)
    for e in errors:
        print("ERROR:", e)
    print(f"check_explorer: {'OK' if not errors else f'{len(errors)} problem(s)'}")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
