"""MkDocs hook: the pages generated from the code and from the committed reports.

Run by ``mkdocs build`` (``./dev docs``, and ``./dev test`` with ``--strict``); nothing it writes
is committed, so nothing it shows can go stale:

* ``reference/cli.md`` — every ``dpfl`` command's ``--help``, read from the argparse parsers of
  :func:`dpfl.cli.build_parser`;
* ``reference/config.md`` — the run config schema, read from the pydantic models of
  :mod:`dpfl.config` (type, default, constraints; descriptions from the models' docstrings and
  from ``FIELD_NOTES`` below, whose keys must all be fields of the schema), and its JSON schema
  as ``reference/run-config.schema.json``;
* ``reports/**`` — the committed reproduction reports (``reports/*.md`` and their PNGs) as pages
  of the site, with ``reports/README.md`` as ``reports/index.md``;
* in any page, ``<!-- dpfl:main-job-output -->`` is replaced by the README's block of what
  ``./dev run`` prints (the one a test compares with the main job's real output);
* in any page, ``<!-- dpfl:reports-index 000 -->`` is replaced by the section of the reports'
  index (``reports/README.md``, "Every figure and table of the five papers") for paper 000,
  with every report it names linked to that report's page;
* on the reference pages, the Sphinx roles of the docstrings (:func:`x`) are dropped, the code kept.
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import re
import types
import typing
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"

# ------------------------------------------------------------------------------------------------
# the command line


def _parser_help(parser: argparse.ArgumentParser) -> str:
    old = os.environ.get("COLUMNS")
    # argparse wraps to the terminal (COLUMNS - 2): the page is the same everywhere, and 78 characters
    # fit a code block at 1280 px (tests/integration/test_docs_site.py)
    os.environ["COLUMNS"] = "80"
    try:
        return parser.format_help()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in the order ``--help`` lists them."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def cli_markdown() -> str:
    """The command-line reference: a table of the commands, then each command's ``--help``."""
    from dpfl.cli import build_parser

    parser = build_parser()
    lines = ["# Command line", "",
             "Generated from the argparse parsers of `dpfl.cli` when the site is built: each section",
             "is the command's `--help`. `CONFIG` is a YAML file or a built-in name (`default`).", "",
             "| command | what it does |", "|---|---|"]
    commands = _subcommands(parser)
    for name, text, sub in commands:
        lines.append(f"| [`dpfl {name}`](#dpfl-{name}) | {_cell(text)} |")
        for sub_name, sub_text, _ in _subcommands(sub):
            lines.append(f"| [`dpfl {name} {sub_name}`](#dpfl-{name}-{sub_name}) | {_cell(sub_text)} |")
    lines += ["", "```text", _parser_help(parser).rstrip(), "```", ""]

    def section(path: list[str], p: argparse.ArgumentParser, depth: int) -> None:
        title = "dpfl " + " ".join(path)
        lines.extend([f"{'#' * depth} `{title}` {{ #{'-'.join(['dpfl', *path])} }}", "",
                      "```text", _parser_help(p).rstrip(), "```", ""])
        for sub_name, _, sub in _subcommands(p):
            section([*path, sub_name], sub, depth + 1)

    for name, _, sub in commands:
        section([name], sub, 2)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# the config schema

FIELD_NOTES: dict[str, str] = {
    "name": "a label for the run, printed with its id and in `dpfl runs`",
    "seed": "seeds every random stream of a simulated run; part of the run id like every field",
    "rounds": "rounds T to run",
    "data.name": "a data set `dpfl data list` knows, or `module:attribute` of your own loader "
                 "(called with `dir`, returning a `dpfl.data.FederatedDataset`)",
    "data.dir": "the folder holding `<data set>/<standard file names>`",
    "data.verify": "check every file against its pinned sha256",
    "partition.kind": "how training samples are split: IID, Dirichlet(α) label skew, k classes per "
                      "client, size groups (000's unbalanced split), or the data set's natural clients",
    "partition.num_clients": "number of clients",
    "partition.samples_per_client": "samples per client of `iid` (default: the training set shared out equally) "
                                    "and `classes`",
    "partition.sizes": "`iid` with explicit sizes, one per client",
    "partition.alpha": "α of `dirichlet`: small α gives clients few classes, large α approaches IID",
    "partition.classes_per_client": "k of `classes`: each client holds exactly k labels, in equal amounts",
    "partition.group_sizes": "samples per client in each group of `groups` (default: 000's 400, 600, 800, "
                             "1000, 1200)",
    "partition.min_size": "smallest client: a `dirichlet` draw leaving a smaller one is redrawn, `natural` "
                          "drops smaller ids",
    "model.name": "`svm`, `logistic`, `mlp`, `cnn-000`, `cnn2`, `cnn-mnist-small`, `vgg-small`, "
                  "`resnet18`, or `module:attribute` called as `f(input_shape, num_classes, **options)`",
    "model.options": "keyword options of the model (e.g. `{hidden: 64}` for `mlp`)",
    "algorithm.name": "a registered algorithm: `dpfl options` lists them",
    "algorithm.options": "the algorithm's options: [Algorithm options](../options.md)",
    "sampling.kind": "all clients every round, a fixed-size uniform sample, Poisson sampling, or a participation "
                     "schema for a fleet that cannot be sampled ([Training when you cannot sample clients]"
                     "(../how-to/cannot-sample.md))",
    "sampling.clients_per_round": "K of `fixed`",
    "sampling.sample_rate": "q of `poisson`: each client joins each round independently with probability q; of "
                            "`cyclic_poisson`: each client of round t's group",
    "sampling.min_separation": "b of a participation schema: the fewest rounds between two participations of a "
                               "client (`cyclic_poisson`: the number of groups)",
    "sampling.max_participations": "k of `min_separation` and `availability`: the most rounds a client takes part "
                                   "in (default: unlimited)",
    "sampling.availability": "the device-availability simulator of `availability`",
    "sampling.availability.period": "rounds per day",
    "sampling.availability.window": "the fraction of the day a device is online (idle, charging, on Wi-Fi)",
    "sampling.availability.checkin_rate": "the probability an online device checks in, each round",
    "sampling.availability.peak": "the centre of the devices' windows, as a fraction of the day",
    "sampling.availability.spread": "the spread of the windows' phases, as a fraction of the day",
    "sampling.availability.max_cohort": "the server keeps at most this many check-ins per round (the first)",
    "sampling.availability.seed": "seed of the devices' phases (public)",
    "local.lr": "local learning rate",
    "local.epochs": "passes over the client's data (ignored when `steps` is set)",
    "local.batch_size": "samples per step; `null` is full-batch gradient descent (UDP)",
    "local.steps": "exact number of local steps (004's Q); batches continue across reshuffled epochs",
    "local.optimizer": "`{name: sgd, momentum, weight_decay}` or `{name: adam, betas, eps, weight_decay}`; "
                       "state per client, reset every round",
    "engine": "`vectorized` (a cohort at once), `sequential` (the reference loop) or `ray` (shards on Ray actors)",
    "device": "where the engine trains: `cpu`, `cuda`, `cuda:N` or `mps`; part of the run id",
    "threads": "torch threads of the run",
    "eval_every": "evaluate the global model on the test set every this many rounds",
    "checkpoint_every": "checkpoint every this many rounds (a killed run resumes from the last one)",
}

_BOUNDS = (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"))


def _is_model(tp: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _type_text(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is type(None):
        return "null"
    if origin is typing.Annotated:
        return _type_text(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type_text(a) for a in args)
    if origin in (list, tuple, dict):
        inner = ", ".join(_type_text(a) for a in args)
        return f"{origin.__name__}[{inner}]"
    if _is_model(tp):
        return "mapping"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def _bounds(metadata: list[Any]) -> list[str]:
    out = []
    for meta in metadata:
        for attr, sign in _BOUNDS:
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value:g}")
    return out


def _constraints(field: Any) -> str:
    parts = _bounds(field.metadata)
    for arg in typing.get_args(field.annotation):  # `list[Annotated[int, Field(ge=1)]]`: items' bounds
        for inner in typing.get_args(arg):
            if typing.get_origin(inner) is typing.Annotated:
                parts += [f"each {b}" for b in _bounds(list(inner.__metadata__))]
    return ", ".join(parts)


def _default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
        if _is_model(type(value)):
            return "(below)" if type(value).model_fields else "`{}`"
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _attributes(model: Any) -> dict[str, str]:
    """The Google-style ``Attributes:`` section of a model's docstring, field → text."""
    doc = model.__doc__ or ""
    if "Attributes:" not in doc:
        return {}
    out: dict[str, str] = {}
    name = None
    for line in doc.split("Attributes:", 1)[1].splitlines():
        m = re.match(r"^\s{4,8}(\w+):\s*(.*)$", line)
        if m and len(line) - len(line.lstrip()) <= 8:
            name = m.group(1)
            out[name] = m.group(2)
        elif name and line.strip():
            out[name] += " " + line.strip()
        elif not line.strip() and out:
            name = None
    return {k: _plain(v) for k, v in out.items()}


def _plain(text: str) -> str:
    """Docstring markup as Markdown: ``x`` and :role:`x` become `x`."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", " ".join(text.split()))
    return text.replace("``", "`")


def _summary(model: Any) -> str:
    return _plain((model.__doc__ or "").split("Attributes:", 1)[0])


def _models_of(annotation: Any) -> list[Any]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Annotated:
        return _models_of(args[0])
    if _is_model(annotation):
        return [annotation]
    return [a for a in args if _is_model(a)]


def _table(model: Any, prefix: str, seen: set[str]) -> list[str]:
    notes = _attributes(model)
    rows = ["| key | type | default | constraints | description |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        key = prefix + name
        seen.add(key)
        text = field.description or notes.get(name) or FIELD_NOTES.get(key, "")
        rows.append(f"| `{key}` | {_type_text(field.annotation)} | {_default(field)} | "
                    f"{_constraints(field)} | {text.replace('|', chr(92) + '|')} |")
    return rows


def config_markdown() -> str:
    """The run config reference, from :class:`dpfl.config.RunConfig`."""
    from dpfl.config import RunConfig

    seen: set[str] = set()
    out = ["# Run config", "",
           "Generated from the pydantic models of `dpfl.config` when the site is built. A config is a",
           "YAML file (or a built-in name: `default`); every key has a default, so a file names only what",
           "it changes. Unknown keys, a key given twice, a boolean where a number is expected and a",
           "non-finite number are errors. `dpfl run CONFIG --set key=value` overrides one key",
           "(`--set privacy.delta=1e-6`). In Python, `dpfl.train(..., sampling={...}, local={...},",
           "privacy={...})` takes the sections of the same names.", "",
           "## Top level", "", _summary(RunConfig), "", *_table(RunConfig, "", seen), ""]
    for name, field in RunConfig.model_fields.items():
        for model in _models_of(field.annotation):
            out += [f"## `{name}`", "", _summary(model), "", *_table(model, name + ".", seen), ""]
            for sub_name, sub_field in model.model_fields.items():
                for sub in _models_of(sub_field.annotation):
                    kind = sub.model_fields["name"].default if "name" in sub.model_fields else None
                    title = f"`{name}.{sub_name}`" + (f" (`name: {kind}`)" if isinstance(kind, str) else
                                                      f" (`name: {sub.__name__.removesuffix('Config').lower()}`)")
                    out += [f"### {title}", "", _summary(sub), "", *_table(sub, f"{name}.{sub_name}.", seen), ""]
    stale = sorted(set(FIELD_NOTES) - seen)
    if stale:
        raise PluginError(f"docs/hooks/dpfl_docs.py FIELD_NOTES names keys the config does not have: {stale}")
    default = (ROOT / "src" / "dpfl" / "configs" / "default.yaml").read_text(encoding="utf-8")
    out += ["## Example: the built-in `default` config", "",
            "The main job (`./dev run`, `dpfl run default`), as shipped in `src/dpfl/configs/default.yaml`:", "",
            "``` { .yaml .no-run }", default.rstrip(), "```", "",
            "## JSON schema", "",
            "For editors that validate YAML against a JSON schema:",
            f"[`{SCHEMA_FILE.rpartition('/')[2]}`]({SCHEMA_FILE.rpartition('/')[2]})",
            "(`RunConfig.model_json_schema()`, generated with this page).", ""]
    return "\n".join(out)


SCHEMA_FILE = "reference/run-config.schema.json"


def config_schema() -> str:
    """The run config's JSON schema, a file of the site (its descriptions are long lines: as a
    file, not a code block that scrolls)."""
    from dpfl.config import RunConfig

    return json.dumps(RunConfig.model_json_schema(), indent=2) + "\n"


# ------------------------------------------------------------------------------------------------
# the reports


def _report_target(name: str) -> str | None:
    """The page (site path) of a report named as the index names it, or None."""
    name = name.strip("`").rstrip("/")
    if name.endswith(".md") and (REPORTS / name).is_file():
        return f"reports/{name}"
    folder = REPORTS / name
    if (folder / "report.md").is_file():
        return f"reports/{name}/report.md"
    if (folder / "README.md").is_file():
        return f"reports/{name}/README.md"
    if folder.is_dir():
        scales = [p for p in sorted(folder.iterdir()) if (p / "report.md").is_file()]
        if len(scales) == 1:
            return f"reports/{name}/{scales[0].name}/report.md"
    return None


def link_reports(markdown: str, page_uri: str) -> str:
    """Each `` `NNN_x/scale` `` (or `` `audit/README.md` ``) that names a report becomes a link to it."""
    here = posixpath.dirname(page_uri)

    def sub(m: re.Match[str]) -> str:
        target = _report_target(m.group(1))
        if target is None:
            return m.group(0)
        if target == "reports/README.md":
            target = "reports/index.md"
        return f"[{m.group(0)}]({posixpath.relpath(target, here or '.')})"

    return re.sub(r"(?<!\[)`((?:\d{3}_[\w.-]+(?:/(?:smoke|reduced|full))?|audit/README\.md|\d{3}_README\.md))`",
                  sub, markdown)


def paper_section(paper: str) -> str:
    """The rows of the reports' index for one paper (``### 000 — ...`` up to the next heading)."""
    text = (REPORTS / "README.md").read_text(encoding="utf-8")
    m = re.search(rf"^### {paper} — .*?$(.*?)(?=^##)", text, flags=re.S | re.M)
    if m is None:
        raise PluginError(f"reports/README.md has no section '### {paper} — ...'")
    return m.group(1).strip()


def _report_files(config: MkDocsConfig) -> list[File]:
    out = []
    for path in sorted(REPORTS.rglob("*")):
        if path.suffix not in (".md", ".png") or not path.is_file():
            continue
        rel = path.relative_to(REPORTS).as_posix()
        uri = "reports/index.md" if rel == "README.md" else f"reports/{rel}"
        out.append(File.generated(config, uri, abs_src_path=str(path)))
    return out


# ------------------------------------------------------------------------------------------------
# mkdocs events


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "reference/cli.md", content=cli_markdown()))
    files.append(File.generated(config, "reference/config.md", content=config_markdown()))
    files.append(File.generated(config, SCHEMA_FILE, content=config_schema()))
    for f in _report_files(config):
        files.append(f)
    return files


_MARKER = re.compile(r"<!-- dpfl:reports-index (\d{3}) -->")
_MAIN_JOB = "<!-- dpfl:main-job-output -->"


def main_job_output() -> str:
    """The README's ```text block under its heading "What `./dev run` prints", marked ``.wrap``:
    its privacy lines are longer than a code block of the site (printed lines, wrapped as a
    terminal wraps them)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## What `\./dev run` prints\n.*?^```text\n(.*?^```)$", readme, flags=re.S | re.M)
    if m is None:
        raise PluginError("README.md has no ```text block under '## What `./dev run` prints'")
    return "``` { .text .wrap }\n" + m.group(1)



def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    uri = page.file.src_uri
    markdown = _MARKER.sub(lambda m: paper_section(m.group(1)), markdown)
    if _MAIN_JOB in markdown:
        markdown = markdown.replace(_MAIN_JOB, main_job_output())
    if uri.startswith(("reports/", "papers/")):
        markdown = link_reports(markdown, uri)
    return markdown


_ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc|obj):<code>~?")


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Docstrings cross-reference in Sphinx's roles (:func:`train`); mkdocstrings prints the role
    before the code: keep the code only."""
    if page.file.src_uri.startswith("reference/"):
        html = _ROLE.sub("<code>", html)
    return html
