"""Every code example of the documentation site (docs/**/*.md) runs, page by page, as the page
shows it (conventions in docs/development.md, "This documentation"):

* a ```python block runs; the python blocks of one page share one namespace, in page order; a block
  marked ``{ .python .no-run }`` is shown, not run;
* a ``{ .text .output }`` block lists lines the page's examples print, in that order;
* a ``{ .bash .run }`` block holds `dpfl` commands, each of which must succeed (run in process, in
  the page's folder, with the real data sets as ``data/``; a line ending in `` \\`` continues on
  the next); other shell blocks are shown, not run;
* ``.wrap`` on a text block shows lines longer than the page wrapped (printed lines: the page's
  code blocks fit 80 characters, tests/integration/test_docs_site.py).

Each page runs in a fresh folder holding ``runs/``. Examples are kept small: the whole module is
meant to take well under 30 s.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", flags=re.M | re.S)
MARKS = {"no-run", "run", "output", "wrap"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    marks: frozenset[str]
    body: str

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def _info(info: str) -> tuple[str, frozenset[str]]:
    """``python`` → ("python", {}); ``{ .python .no-run }`` → ("python", {"no-run"})."""
    info = info.strip()
    if info.startswith("{"):
        classes = re.findall(r"\.([\w-]+)", info)
        return (classes[0] if classes else ""), frozenset(classes[1:])
    return (info.split()[0] if info else ""), frozenset()


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    page = path.relative_to(DOCS).as_posix()
    out = []
    for m in FENCE.finditer(text):
        lang, marks = _info(m.group("info"))
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, lang, marks, m.group("body")))
    return out


def commands(body: str) -> list[str]:
    """The command lines of a shell block: a line ending in `` \\`` continues on the next."""
    return body.replace("\\\n", " ").splitlines()


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)


def _runnable(page: Path) -> bool:
    return any(_runs(b) for b in blocks(page))


def _runs(b: Block) -> bool:
    return (b.lang == "python" and "no-run" not in b.marks) or (b.lang == "bash" and "run" in b.marks)


RUNNABLE = [p for p in _pages() if _runnable(p)]


def test_every_block_is_marked_as_the_runner_reads_it() -> None:
    """A mistyped mark would silently skip an example: only the known marks, each where it means
    something; no other spelling of a Python block."""
    problems = []
    for page in _pages():
        previous: Block | None = None
        for b in blocks(page):
            if not b.marks <= MARKS:
                problems.append(f"{b.where}: unknown mark(s) {sorted(b.marks - MARKS)}")
            if b.lang in ("py", "python3", "pycon"):
                problems.append(f"{b.where}: write ```python (or {{ .python .no-run }})")
            if "run" in b.marks and b.lang != "bash":
                problems.append(f"{b.where}: .run marks a bash block of dpfl commands")
            if "wrap" in b.marks and b.lang != "text":
                problems.append(f"{b.where}: .wrap marks a text block (printed lines), not code")
            if "output" in b.marks and not (b.lang == "text" and previous is not None and previous.lang == "python"
                                            and "no-run" not in previous.marks):
                problems.append(f"{b.where}: {{ .text .output }} follows the python block whose output it shows")
            if b.lang == "bash" and "run" in b.marks:
                for line in commands(b.body):
                    words = shlex.split(line, comments=True)
                    if words and words[0] != "dpfl":
                        problems.append(f"{b.where}: a .run block holds dpfl commands only: {line!r}")
            previous = b
    assert not problems, "\n".join(problems)


PATH = re.compile(r"(?<![\w./(])((?:src|tests|benchmarks|reports|docs)/[\w./-]*\w)")  # not a link: mkdocs checks those
OTHERS = {"architecture.md", "testing.md"}  # pages kept with the code they describe, checked there


def test_the_files_the_pages_name_exist() -> None:
    """Modules get renamed: a path a guide names (``src/dpfl/audit/estimate.py``) must still be there."""
    missing = []
    for page in [ROOT / "README.md", *_pages()]:
        rel = page.relative_to(ROOT).as_posix()
        if rel.removeprefix("docs/") in OTHERS or rel.startswith("docs/proofs/"):
            continue
        for m in PATH.finditer(page.read_text(encoding="utf-8")):
            path = m.group(1)
            if re.search(r"[A-Z]{3,}", path.split("/")[-1].split(".")[0]):  # a placeholder: NNN_NAME, NAME.py
                continue
            if not (ROOT / path).exists():
                missing.append(f"{rel}: {path}")
    assert not missing, "\n".join(missing)


def test_some_pages_run_examples() -> None:
    names = {p.relative_to(DOCS).as_posix() for p in RUNNABLE}
    assert {"get-started.md", "how-to/own-model-and-data.md", "how-to/choose-noise.md"} <= names, names


@pytest.mark.parametrize("page", RUNNABLE, ids=[p.relative_to(DOCS).as_posix() for p in RUNNABLE])
def test_the_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               request: pytest.FixtureRequest) -> None:
    from dpfl.cli import main

    page_blocks = blocks(page)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    if any(b.lang == "bash" and "run" in b.marks for b in page_blocks):
        shared = request.getfixturevalue("shared_data")  # dpfl commands read the real data sets as data/
        (tmp_path / "data").symlink_to(shared, target_is_directory=True)
    namespace: dict[str, object] = {"__name__": "__main__"}
    printed = io.StringIO()
    checked = 0  # printed lines already matched by an output block
    for b in page_blocks:
        if b.lang == "python" and "no-run" not in b.marks:
            with contextlib.redirect_stdout(printed):
                exec(compile(b.body, b.where, "exec"), namespace)  # noqa: S102 - the documentation's own example
        elif b.lang == "text" and "output" in b.marks:
            lines = [ln.rstrip() for ln in printed.getvalue().splitlines()]
            for want in (ln.rstrip() for ln in b.body.splitlines() if ln.strip()):
                assert want in lines[checked:], (f"{b.where}: the page shows a line its example does not print:\n"
                                                 f"  {want}\nprinted:\n" + "\n".join(lines))
                checked = lines.index(want, checked) + 1
        elif b.lang == "bash" and "run" in b.marks:
            for line in commands(b.body):
                words = shlex.split(line, comments=True)
                if not words:
                    continue
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    status = main(words[1:])
                assert status == 0, f"{b.where}: `{line.strip()}` exited {status}:\n{out.getvalue()[-2000:]}"
