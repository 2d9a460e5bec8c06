#!/usr/bin/env python3
"""Check the built book (``_build/html``) offline.

Checks, for every HTML page:

1. every local link, script, stylesheet and image exists (and ``page.html#anchor`` anchors
   exist in the target page);
2. no script or stylesheet is loaded from another host (the site must work with no network);
   images and links to other sites are only counted;
3. no notebook output is an error: no traceback output block, no "Traceback (most recent call
   last)" and no ``SomethingError:`` line inside an output area;
4. pages that contain math load the local MathJax, and the file exists;
5. CSS files under ``_static`` do not ``@import`` or ``url()`` anything from another host;
6. every ipywidgets view on a page has its model in the page's saved widget state (so the widget
   can render without a kernel); the number of images that Output widgets carry in that state is
   reported;
7. no dead cross-reference: a ``{func}``/``{mod}``/``{class}``/``{data}``/``{doc}`` role (or a
   ``:func:`` in a docstring) that Sphinx could not resolve is rendered as a ``<code class="xref
   ...">`` or ``<span class="xref ...">`` outside any ``<a>``; a resolved one sits inside
   ``<a class="reference internal">``. Fix the role's target (e.g. the module path) or document
   the object on the API pages (``book/api.md``, ``book/api/``).

With ``--browser`` it also opens pages in headless Chromium (no network use: every page is a
``file://`` URL and background networking is disabled) and checks that MathJax actually
rendered (``mjx-container`` elements in the final DOM) and that pages with widgets rendered them
(``jupyter-widgets`` elements, and at least as many inline PNG images as the saved Output-widget
state holds); on the page of the static explorer it runs ``tools/check_explorer.py`` (every
sentence x method drawn, every control changes the picture); ``--screenshots DIR`` saves a PNG
of each page to look at.

Exit status 0 when everything passes, 1 otherwise. Usage::

    python tools/check_site.py [_build/html] [--browser] [--screenshots DIR [--shot-height PX]] [--pages GLOB ...]
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import re
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_explorer import FLAGS as CHROME_FLAGS, check_page, find_chromium  # noqa: E402

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr"}
ERROR_LINE = re.compile(r"^\s*([A-Z][A-Za-z]*(Error|Exception)|KeyboardInterrupt)(:|\s*$)", re.M)
EXTERNAL = re.compile(r"^(https?:)?//", re.I)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


class Page(HTMLParser):
    """Collects references, anchors, math and the text of notebook output areas of one page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.refs: list[tuple[str, str, str]] = []   # (kind, tag, url)
        self.ids: set[str] = set()
        self.stack: list[tuple[str, bool]] = []      # (tag, opens an output area)
        self.output_depth = 0
        self.output_text: list[str] = []
        self.traceback_blocks = 0
        self.stderr_blocks = 0
        self.has_math = False
        self.mathjax_src: list[str] = []
        self.widget_views: list[str] = []            # JSON text of each widget-view script
        self.widget_states: list[str] = []           # JSON text of each widget-state script
        self._script_kind: str | None = None
        self._script_text: list[str] = []
        self.dead_xrefs: list[str] = []               # text of each unresolved cross-reference
        self._xref_depth: int | None = None           # stack depth of the dead xref being read
        self._xref_text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        cls = a.get("class") or ""
        if tag == "script" and a.get("type") in (WIDGET_VIEW, WIDGET_STATE):
            self._script_kind, self._script_text = a["type"], []
        if tag == "script" and a.get("src"):
            self.refs.append(("script", tag, a["src"]))
            if "mathjax" in a["src"].lower() or "tex-" in a["src"].lower():
                self.mathjax_src.append(a["src"])
        elif tag == "link" and a.get("href"):
            rel = (a.get("rel") or "").lower()
            kind = "style" if "stylesheet" in rel else ("script" if a.get("as") == "script" else "link")
            if "preload" in rel and a.get("as") in ("style", "font"):
                kind = "style"
            self.refs.append((kind, tag, a["href"]))
        elif tag in ("img", "source", "iframe", "embed", "video", "audio") and a.get("src"):
            self.refs.append(("image" if tag == "img" else "media", tag, a["src"]))
        elif tag == "a" and a.get("href"):
            self.refs.append(("anchor", tag, a["href"]))
        if "math" in cls.split() or "math notranslate" in cls:
            self.has_math = True
        if tag in VOID:
            return
        if (tag in ("code", "span") and "xref" in cls.split() and self._xref_depth is None
                and not any(t == "a" for t, _ in self.stack)):
            self._xref_depth, self._xref_text = len(self.stack), []
        opens = "cell_output" in cls.split()
        if "traceback" in cls.split() or "highlight-ipythontb" in cls:
            self.traceback_blocks += 1
        if "stderr" in cls.split():
            self.stderr_blocks += 1
        self.stack.append((tag, opens))
        if opens:
            self.output_depth += 1

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if tag == "script" and self._script_kind is not None:
            text = "".join(self._script_text)
            (self.widget_views if self._script_kind == WIDGET_VIEW else self.widget_states).append(text)
            self._script_kind = None
        # pop to the matching tag (tolerates unclosed <p> etc.)
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                for _, opened in self.stack[k:]:
                    if opened:
                        self.output_depth -= 1
                del self.stack[k:]
                break
        if self._xref_depth is not None and len(self.stack) <= self._xref_depth:
            self.dead_xrefs.append(" ".join("".join(self._xref_text).split()))
            self._xref_depth = None

    def handle_data(self, data):
        if self._script_kind is not None:
            self._script_text.append(data)
            return
        if self._xref_depth is not None:
            self._xref_text.append(data)
        if self.output_depth > 0:
            self.output_text.append(data)


def parse_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    page.close()
    return page


def widget_summary(page: Page) -> tuple[list[str], int, int]:
    """Model ids of the page's widget views that are missing from its saved widget state, the
    number of images (``image/*`` outputs) that Output widgets hold in that state, and the number of
    Output-widget outputs that are a matplotlib figure as text only (``<Figure size ...>``: the
    figure was displayed without an image formatter, so the page shows no image)."""
    views = []
    for text in page.widget_views:
        try:
            views.append(json.loads(text)["model_id"])
        except (ValueError, KeyError, TypeError):
            views.append(f"<unreadable view: {text[:40]!r}>")
    state: dict = {}
    for text in page.widget_states:
        try:
            state.update(json.loads(text).get("state", {}))
        except (ValueError, AttributeError):
            pass
    missing = [v for v in views if v not in state]
    images = figure_text = 0
    for model in state.values():
        if model.get("model_name") == "OutputModel":
            for out in model.get("state", {}).get("outputs", []):
                data = out.get("data", {})
                images += any(k.startswith("image/") for k in data)
                figure_text += set(data) == {"text/plain"} and str(data["text/plain"]).startswith("<Figure size")
    return missing, images, figure_text


def is_local(url: str) -> bool:
    if not url or url.startswith("#"):
        return False
    scheme = urlsplit(url).scheme.lower()
    return not scheme and not url.startswith("//")


def check_site(root: Path, pages_glob: list[str] | None = None) -> tuple[list[str], list[str], list[Path]]:
    errors: list[str] = []
    notes: list[str] = []
    html_files = sorted(root.rglob("*.html"))
    if not html_files:
        return [f"no HTML files under {root}"], notes, []
    parsed: dict[Path, Page] = {}

    def get(path: Path) -> Page:
        if path not in parsed:
            parsed[path] = parse(path)
        return parsed[path]

    external_links = 0
    external_images = 0
    selected: list[Path] = []
    for path in html_files:
        rel = path.relative_to(root).as_posix()
        if rel.startswith("_static/") or rel.startswith("_sources/"):
            continue
        if pages_glob and not any(fnmatch.fnmatch(rel, g) for g in pages_glob):
            continue
        selected.append(path)
        page = get(path)
        for kind, tag, url in page.refs:
            if EXTERNAL.match(url):
                if kind in ("script", "style"):
                    errors.append(f"{rel}: external {kind} <{tag}> {url} (the site must work offline)")
                elif kind in ("image", "media"):
                    external_images += 1
                    notes.append(f"{rel}: external image {url}")
                else:
                    external_links += 1
                continue
            if url.startswith("data:") or not is_local(url):
                continue
            parts = urlsplit(url)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if parts.path.endswith("/") or (target.is_dir() and parts.path):
                target = target / "index.html"
            if not target.exists():
                errors.append(f"{rel}: missing {kind} target {url}")
                continue
            if parts.fragment and target.suffix == ".html" and kind == "anchor":
                if parts.fragment not in get(target).ids:
                    errors.append(f"{rel}: anchor #{parts.fragment} not found in {target.relative_to(root)}")
        text = "".join(page.output_text)
        if page.traceback_blocks:
            errors.append(f"{rel}: {page.traceback_blocks} traceback output block(s)")
        if "Traceback (most recent call last)" in text:
            errors.append(f"{rel}: a notebook output contains a Python traceback")
        for m in ERROR_LINE.finditer(text):
            errors.append(f"{rel}: a notebook output contains an error line: {m.group(0).strip()[:80]!r}")
        for target in page.dead_xrefs:
            errors.append(f"{rel}: dead cross-reference {target!r} (no such object on the API pages)")
        if page.stderr_blocks:
            notes.append(f"{rel}: {page.stderr_blocks} stderr output block(s) (warnings; check they are intended)")
        if page.widget_views:
            missing, images, figure_text = widget_summary(page)
            for model_id in missing:
                errors.append(f"{rel}: widget {model_id} has no saved state (it cannot render without a kernel)")
            if figure_text:
                errors.append(f"{rel}: {figure_text} Output-widget output(s) hold a matplotlib figure as text only "
                              "(display PNG bytes, e.g. IPython.display.Image, instead of the figure)")
            notes.append(f"{rel}: {len(page.widget_views)} widget view(s), {images} image(s) in Output widgets")
        if page.has_math:
            if not page.mathjax_src:
                errors.append(f"{rel}: page has math but loads no MathJax")
            for src in page.mathjax_src:
                if EXTERNAL.match(src):
                    errors.append(f"{rel}: MathJax is loaded from another host: {src}")
    # CSS pulling fonts or styles from other hosts
    for css in sorted((root / "_static").rglob("*.css")):
        content = css.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r"(@import\s+(url\()?|url\()\s*['\"]?((https?:)?//[^'\")\s]+)", content):
            errors.append(f"{css.relative_to(root)}: loads {m.group(3)} from another host")
    notes.append(f"{len(selected)} pages checked; {external_links} links to other sites (not followed), "
                 f"{external_images} external images")
    return errors, notes, selected


def browser_checks(root: Path, pages: list[Path], shots: Path | None, timeout: int = 90,
                   shot_height: int = 1800) -> list[str]:
    """Render pages in headless Chromium: MathJax must have produced mjx-container elements."""
    errors: list[str] = []
    exe = find_chromium()
    if exe is None:
        return ["--browser: no chromium found (Debian: apt-get install chromium)"]
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
    for path in pages:
        rel = path.relative_to(root).as_posix()
        url = path.resolve().as_uri()
        with tempfile.TemporaryDirectory(prefix="cmix-chrome-") as profile:
            base = [exe, *CHROME_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000"]
            try:
                dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True,
                                     timeout=timeout).stdout
            except subprocess.TimeoutExpired:
                errors.append(f"{rel}: chromium timed out")
                continue
            page = parse(path)
            rendered = dom.count("<mjx-container")
            if page.has_math and rendered == 0:
                errors.append(f"{rel}: page has math but MathJax rendered nothing in the browser")
            print(f"  {rel}: {rendered} MathJax elements rendered" + (" (no math on page)" if not page.has_math else ""))
            if page.widget_views:
                _, images, _ = widget_summary(page)
                widgets = dom.count("jupyter-widgets")
                inline = dom.count("data:image/png") - parse_text(path).count("data:image/png")
                print(f"  {rel}: widgets rendered ({widgets} widget elements, {inline} inline image(s))")
                if widgets == 0:
                    errors.append(f"{rel}: page has widgets but none rendered in the browser")
                elif inline < images:
                    errors.append(f"{rel}: {images} image(s) in the saved Output-widget state, {inline} rendered")
            if "cmix-explorer-data" in parse_text(path):
                errors += check_page(path)
            if shots:
                out = shots / (rel.replace("/", "__").replace(".html", ".png"))
                subprocess.run([*base, f"--window-size=1280,{shot_height}", f"--screenshot={out}", url],
                               capture_output=True, timeout=timeout)
                if out.exists():
                    print(f"    screenshot: {out}")
                else:
                    errors.append(f"{rel}: screenshot failed")
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="_build/html", type=Path)
    ap.add_argument("--browser", action="store_true", help="also render pages in headless Chromium")
    ap.add_argument("--screenshots", type=Path, default=None, help="save PNG screenshots here (implies --browser)")
    ap.add_argument("--shot-height", type=int, default=1800,
                    help="height of the screenshots in pixels (e.g. 20000 to capture whole chapters)")
    ap.add_argument("--pages", nargs="*", default=None, help="glob(s) of pages relative to root (default: all)")
    ap.add_argument("--quiet", action="store_true", help="print only errors")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    if not root.is_dir():
        print(f"{root} does not exist: build the book first (make book)", file=sys.stderr)
        return 1
    errors, notes, pages = check_site(root, args.pages)
    if not args.quiet:
        for note in notes:
            print("note:", note)
    if args.browser or args.screenshots:
        print("rendering in headless Chromium:")
        errors += browser_checks(root, pages, args.screenshots, shot_height=args.shot_height)
    for err in errors:
        print("ERROR:", err)
    print(f"check_site: {'OK' if not errors else f'{len(errors)} problem(s)'} ({root})")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
