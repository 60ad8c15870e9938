"""The documentation site reads well at 1280 px: the built site (``mkdocs build --strict``, once
per module, about 15 s) is checked as a reader meets it.

* No code block scrolls sideways. At a 1280 px window, Material's content column (both sidebars
  shown) leaves a code block 656 px of text (688 px less 2 × 16 px padding); its code font is
  13.6 px, a monospace advance of 0.6 em (DejaVu Sans Mono, Menlo, SF Mono: 8.18 px), so 80
  characters fit. Measured in headless Chromium (``scrollWidth`` against ``clientWidth`` of every
  ``pre > code``, the slow test below); between 1220 and 1600 px the column does not change. The
  one way past the limit is a printed text block marked ``.wrap`` (docs/stylesheets/dpfl.css):
  a privacy statement or a notice that dpfl prints as one long line, shown wrapped as a terminal
  wraps it; commands and code are broken by hand (`` \\`` continuations, reformatted Python).
* The Python API reference names what users import (``dpfl.PrivacySummary``, not its module's
  path) and shows the run store's default as its value; every parameter of what ``dpfl`` exports
  (functions, classes, their methods) and of ``dpfl.data.FederatedDataset`` is documented in its
  docstring.
* The sitemap lists every page (it needs ``site_url``).
* Search finds ε, δ, σ wherever they stand: "(ε, δ)-DP", "ε(α)", "ε_server".
"""

from __future__ import annotations

import html
import inspect
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 80  # characters a code block shows without scrolling at 1280 px (the module's docstring)
API_PAGE = ROOT / "docs" / "reference" / "python-api.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return out


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


# ------------------------------------------------------------------------------------------------
# code blocks

BLOCK = re.compile(r"(?:<div class=\"(?P<cls>[^\"]*)\">\s*)?<pre\b[^>]*>(?P<body>.*?)</pre>", flags=re.S)


def code_blocks(page_html: str) -> list[tuple[set[str], str]]:
    """(classes of the block's highlight div, text as shown) of every ``<pre><code>`` block."""
    out = []
    for m in BLOCK.finditer(page_html):
        if "<code" not in m.group("body"):
            continue
        text = html.unescape(re.sub(r"<[^>]+>", "", m.group("body")))
        out.append((set((m.group("cls") or "").split()), text))
    return out


def width(text: str) -> int:
    return max((len(line.expandtabs(8)) for line in text.splitlines()), default=0)


def test_code_blocks_are_measured_as_the_browser_shows_them() -> None:
    shown = code_blocks('<div class="output wrap highlight"><pre><span></span><code>a &amp;&lt; b\n'
                        '<span class="n">xyz</span></code></pre></div><pre>no code</pre>')
    assert shown == [({"output", "wrap", "highlight"}, "a &< b\nxyz")]
    assert width(shown[0][1]) == 6


def test_no_code_block_scrolls_sideways_at_1280_px(site: Path) -> None:
    wide, wrapped = [], 0
    for page in _pages(site):
        for classes, text in code_blocks(page.read_text(encoding="utf-8")):
            if width(text) <= LIMIT:
                continue
            if "wrap" in classes:  # printed text (test_wrap_marks_printed_text_only), wrapped by the browser
                wrapped += 1
                continue
            line = max(text.splitlines(), key=len)
            wide.append(f"{page.relative_to(site)}: {width(text)} > {LIMIT} characters: {line[:100]!r}")
    assert not wide, (f"{len(wide)} code blocks scroll sideways at 1280 px; break commands with ` \\`, reformat "
                      "code, or mark printed text { .text .wrap }:\n" + "\n".join(wide))
    assert wrapped <= 8, f"{wrapped} wrapped text blocks: keep them for printed lines only"


def test_wrap_marks_printed_text_only() -> None:
    """``.wrap`` soft-wraps a block: right for a long printed line, wrong for a command or code
    (a wrapped command reads as two)."""
    fence = re.compile(r"^\s*```\s*\{([^}]*)\}", flags=re.M)
    wrong = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for m in fence.finditer(page.read_text(encoding="utf-8")):
            classes = re.findall(r"\.([\w-]+)", m.group(1))
            if "wrap" in classes and classes[0] != "text":
                wrong.append(f"{page.relative_to(ROOT)}: {m.group(0).strip()}")
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------------------------------------
# the Python API reference


def _reference_objects() -> dict[str, Any]:
    """Every object the API reference page shows at the top (``::: path``, with its ``members``)."""
    text = API_PAGE.read_text(encoding="utf-8")
    out: dict[str, Any] = {}
    for m in re.finditer(r"^::: ([\w.]+)\n((?:    .*\n)*)", text, flags=re.M):
        path, options = m.group(1), m.group(2)
        members = re.search(r"members: \[([^\]]*)\]", options)
        module_name, _, name = path.rpartition(".")
        try:
            obj = import_module(path)
        except ImportError:
            obj = getattr(import_module(module_name), name)
        if members:
            for member in members.group(1).split(","):
                out[f"{path}.{member.strip()}"] = getattr(obj, member.strip())
        else:
            out[path] = obj
    return out


def _documented(doc: str | None) -> set[str]:
    """Names a Google-style docstring documents (Args, Attributes; ``a, b:`` documents both)."""
    from griffe import Docstring

    if not doc:
        return set()
    names: set[str] = set()
    logging.getLogger("griffe").disabled = True
    try:
        sections = Docstring(inspect.cleandoc(doc), lineno=1, parser="google").parse()
    finally:
        logging.getLogger("griffe").disabled = False
    for section in sections:
        if section.kind.value in ("parameters", "other parameters", "attributes"):
            for entry in section.value:
                names.update(n.strip().lstrip("*") for n in entry.name.split(","))
    return names


def _parameters(fn: Any) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values() if p.name not in ("self", "cls") and not p.name.startswith("_")]


def undocumented_parameters(objects: dict[str, Any]) -> list[str]:
    missing = []
    for path, obj in objects.items():
        if inspect.isclass(obj):
            if issubclass(obj, BaseException):
                continue  # an error's constructor is the message
            init = vars(obj).get("__init__")
            doc = _documented(obj.__doc__) | _documented(getattr(init, "__doc__", None))
            missing += [f"{path}({p})" for p in _parameters(obj) if p not in doc]
            for name, member in vars(obj).items():
                fn = member.__func__ if isinstance(member, classmethod | staticmethod) else member
                if name.startswith("_") or not inspect.isfunction(fn) or not fn.__doc__:
                    continue  # private, not a method, or not shown (mkdocstrings skips a member without docstring)
                missing += [f"{path}.{name}({p})" for p in _parameters(fn) if p not in _documented(fn.__doc__)]
        elif callable(obj):
            missing += [f"{path}({p})" for p in _parameters(obj) if p not in _documented(obj.__doc__)]
    return missing


def test_the_check_reads_google_args() -> None:
    def f(a: int, b: int, *rest: int, c: int = 0, **kw: int) -> None:
        """Do.

        Args:
            a: one.
            b, c: two
                and three.
            **kw: more.
        """

    assert undocumented_parameters({"f": f}) == ["f(rest)"]


def test_every_parameter_the_api_reference_shows_is_documented() -> None:
    """What ``dpfl`` exports, and the types its results hand out (``Certificate``) and a config's
    data loader returns (``FederatedDataset``): every parameter of them and of their methods.
    (The Flower classes further down the page implement Flower's interfaces, documented there.)"""
    objects = {path: obj for path, obj in _reference_objects().items() if not path.startswith("dpfl.runtime.")}
    assert {"dpfl.train", "dpfl.account", "dpfl.FederatedData", "dpfl.data.FederatedDataset"} <= set(objects)
    missing = undocumented_parameters(objects)
    assert not missing, "parameters without an entry in their docstring's Args (or Attributes):\n" + "\n".join(missing)


def test_every_name_dpfl_exports_is_in_the_api_reference() -> None:
    import dpfl

    shown = set(_reference_objects())
    absent = sorted(f"dpfl.{n}" for n in dpfl.__all__ if n != "__version__" and f"dpfl.{n}" not in shown)
    assert not absent, f"exported by dpfl but not in {API_PAGE.relative_to(ROOT)}: {absent}"


def test_the_api_reference_headings_name_the_import_path(site: Path) -> None:
    import dpfl

    page = (site / "reference" / "python-api.html").read_text(encoding="utf-8")
    ids = set(re.findall(r"<h[2-6] id=\"([^\"]+)\"", page))
    for name in dpfl.__all__:
        if name != "__version__":
            assert f"dpfl.{name}" in ids, f"no heading dpfl.{name}"
    internal = sorted(i for i in ids if i.count(".") >= 1 and i.split(".")[1] in ("api", "rounds", "store", "export",
                                                                                  "errors"))
    assert not internal, f"headings under a module path users do not import: {internal}"
    assert "dpfl.data.FederatedDataset" in ids
    assert "DEFAULT_STORE" not in page, "a default shown as a constant's name, not its value"
    assert "runs/dpfl.sqlite" in page


def test_the_store_defaults_written_out_are_the_store_dpfl_uses() -> None:
    import dpfl
    from dpfl.store import DEFAULT_STORE

    for fn, name in ((dpfl.train, "store"), (dpfl.export_model, "store"), (dpfl.RunStore, "path")):
        assert Path(inspect.signature(fn).parameters[name].default) == DEFAULT_STORE, fn


# ------------------------------------------------------------------------------------------------
# sitemap and search


def test_the_sitemap_lists_every_page(site: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    base = config.get("site_url")
    assert base, "mkdocs.yml has no site_url: the sitemap stays empty"
    ns = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
    locs = {e.text for e in ET.parse(site / "sitemap.xml").getroot().findall("s:url/s:loc", ns)}
    pages = {base + p.relative_to(site).as_posix() for p in _pages(site)}
    assert locs, "the sitemap is empty"
    assert locs == pages, (sorted(pages - locs)[:10], sorted(locs - pages)[:10])


def _separator() -> str:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "search" in plugin:
            return str(plugin["search"]["separator"])
    raise AssertionError("mkdocs.yml configures no search separator: Material's splits only at spaces and -")


def tokens(text: str, separator: str) -> list[str]:
    """The words the search indexes, as Material's worker splits them (JavaScript's RegExp reads
    this separator as Python's re does), lower-cased."""
    return [t.lower() for t in re.split(separator, text) if t]


def test_greek_letters_are_words_of_their_own() -> None:
    sep = _separator()
    assert "ε" in tokens("certified ε = 8.47", sep)
    assert {"ε", "δ", "dp"} <= set(tokens("(ε, δ)-DP", sep))
    assert {"ε", "α", "server"} <= set(tokens("ε(α) and ε_server", sep))
    assert "σ" in tokens("noise σ·C", sep) and "8.47" in tokens("ε = 8.47.", sep)


def test_search_finds_every_section_holding_epsilon(site: Path) -> None:
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    sep = index["config"]["separator"]
    assert sep == _separator()
    for letter in "εδσ":
        holding = [d for d in index["docs"] if letter in d["text"] or letter in d["title"]]
        assert holding, letter
        unfound = [d["location"] for d in holding
                   if not any(t.startswith(letter) for t in tokens(d["title"] + " " + d["text"], sep))]
        assert not unfound, f"{len(unfound)} of {len(holding)} sections holding {letter} are not found: {unfound[:5]}"


# ------------------------------------------------------------------------------------------------
# in a browser (slow): every page at 1280 px


BROWSER_SCRIPT = r"""
import chromium from '@sparticuz/chromium';
import puppeteer from 'puppeteer-core';
const [base, list] = process.argv.slice(2);
const pages = JSON.parse(list);
const browser = await puppeteer.launch({args: chromium.args, executablePath: await chromium.executablePath(),
                                        headless: true, defaultViewport: {width: 1280, height: 800}});
const problems = [];
let blocks = 0;

// search first (a query typed before the search worker has built its index is dropped: change
// the typed value, "ε" / "ε ", the same query, until the worker answers)
const home = await browser.newPage();
await home.goto(base + 'index.html', {waitUntil: 'networkidle0'});
const input = 'input[data-md-component="search-query"]';
await home.focus(input);
await home.type(input, 'ε');
let found = 0;
for (let i = 0; i < 20 && !found; i++) {
  await new Promise(r => setTimeout(r, 1500));
  if (i > 0) await home.keyboard.press(i % 2 ? 'Space' : 'Backspace');
  found = await home.evaluate(() => document.querySelectorAll('.md-search-result__item').length);
}
const search = await home.evaluate(() => document.querySelector('.md-search-result__meta')?.textContent);
if (!found) problems.push(`searching ε finds nothing: ${search}`);
await home.close();

for (const path of pages) {
  const page = await browser.newPage();
  await page.setCacheEnabled(false);  // every page and asset fetched: 200, not 304
  page.on('console', m => { if (m.type() === 'error') problems.push(`${path}: console error: ${m.text()}`); });
  page.on('pageerror', e => problems.push(`${path}: page error: ${e.message}`));
  page.on('requestfailed', r => problems.push(`${path}: request failed: ${r.url()}`));
  page.on('response', r => { if (r.status() >= 400) problems.push(`${path}: ${r.status()} ${r.url()}`); });
  const response = await page.goto(base + path, {waitUntil: 'networkidle0'});
  if (response.status() !== 200) problems.push(`${path}: HTTP ${response.status()}`);
  const wide = await page.evaluate(() => {
    const codes = [...document.querySelectorAll('pre > code')];
    for (const c of codes) c.closest('details')?.setAttribute('open', '');  // a collapsed block too
    const longest = text => text.split('\n').reduce((a, b) => b.length > a.length ? b : a, '');
    return codes.map(c => [c.scrollWidth - c.clientWidth, longest(c.textContent)]);
  });
  blocks += wide.length;
  for (const [over, line] of wide) {
    if (over > 0) problems.push(`${path}: code block scrolls ${over} px: ${line.slice(0, 90)}`);
  }
  await page.close();
}
await browser.close();
console.log(JSON.stringify({pages: pages.length, blocks, search, problems}));
"""


@pytest.fixture
def browser_modules() -> Path:
    """A ``node_modules`` folder holding ``puppeteer-core`` and ``@sparticuz/chromium`` (``npm install
    puppeteer-core @sparticuz/chromium`` in a folder outside the repository), named by
    ``DPFL_BROWSER_MODULES``; the test is skipped without it."""
    folder = os.environ.get("DPFL_BROWSER_MODULES")
    if not folder:
        pytest.skip("set DPFL_BROWSER_MODULES to a node_modules folder holding puppeteer-core and @sparticuz/chromium")
    path = Path(folder)
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    for package in ("puppeteer-core", "@sparticuz/chromium"):
        if not (path / package / "package.json").is_file():
            pytest.skip(f"{package} is not installed in DPFL_BROWSER_MODULES={path}")
    return path


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.mark.slow
def test_every_page_in_a_browser_at_1280_px(browser_modules: Path, site: Path, served: str, tmp_path: Path) -> None:
    """Every page loads (200, every resource found, no console or script error), no code block
    scrolls sideways in headless Chromium at 1280 × 800, and searching ε finds pages."""
    (tmp_path / "node_modules").symlink_to(browser_modules, target_is_directory=True)
    script = tmp_path / "check.mjs"
    script.write_text(BROWSER_SCRIPT, encoding="utf-8")
    pages = [p.relative_to(site).as_posix() for p in _pages(site)]
    done = subprocess.run(["node", str(script), served, json.dumps(pages)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["pages"] == len(pages) and report["blocks"] > 100
    assert not report["problems"], "\n".join(report["problems"])
