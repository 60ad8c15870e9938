"""UCI CSV files: Adult and Census-Income (KDD), with their column schemas.

Both are comma-separated with a space after each comma, no header, ``?`` for a missing value and
the label in the last column:

- Adult (https://archive.ics.uci.edu/dataset/2/adult): ``adult.data`` and ``adult.test``, 15
  columns; the test file starts with a ``|1x3 Cross validator`` comment line and its labels end
  with a ``.`` (``>50K.``).
- Census-Income (KDD) (https://archive.ics.uci.edu/dataset/117/census+income+kdd): 42 fields
  per the UCI column description (``census-income.names``): 7 continuous attributes, 33 nominal
  ones (some coded as integers, e.g. the industry and occupation recodes), the ``instance weight``
  (a survey weight the description says to ignore; never a feature here) and the label
  ``- 50000.`` / ``50000+.``. It is dpfl's offline stand-in for the IPUMS-US census task of
  000_3304bf6f36c753f8.txt (binary income label from census attributes).

This module imports nothing from dpfl except :mod:`dpfl.errors` and :mod:`dpfl.data.checksums`.
"""

from __future__ import annotations

import gc
import itertools
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpfl.data.checksums import read_content
from dpfl.errors import DataFormatError

MISSING = "?"


@dataclass(frozen=True)
class UciSchema:
    """The columns of a UCI CSV file and how each is used.

    Attributes:
        name: the data set's name.
        columns: every field, in file order; the last is the label.
        numeric: continuous columns (standardized).
        ignored: columns that are never features (survey weights).
        positive_labels: label strings (without a trailing ``.``) of class 1.
        negative_labels: label strings of class 0.
    """

    name: str
    columns: tuple[str, ...]
    numeric: frozenset[str]
    ignored: frozenset[str]
    positive_labels: frozenset[str]
    negative_labels: frozenset[str]

    @property
    def label_column(self) -> str:
        """The label's column (the last one)."""
        return self.columns[-1]

    @property
    def numeric_columns(self) -> tuple[str, ...]:
        """Continuous feature columns, in file order."""
        return tuple(c for c in self.columns[:-1] if c in self.numeric)

    @property
    def categorical_columns(self) -> tuple[str, ...]:
        """Nominal feature columns, in file order."""
        return tuple(
            c for c in self.columns[:-1] if c not in self.numeric and c not in self.ignored
        )


ADULT_SCHEMA = UciSchema(
    name="adult",
    columns=(
        "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
        "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
        "hours-per-week", "native-country", "income",
    ),
    numeric=frozenset(
        {"age", "education-num", "capital-gain", "capital-loss", "hours-per-week"}
    ),
    # fnlwgt is the CPS sampling weight (see adult.names), not an attribute of the person.
    ignored=frozenset({"fnlwgt"}),
    positive_labels=frozenset({">50K"}),
    negative_labels=frozenset({"<=50K"}),
)

CENSUS_INCOME_SCHEMA = UciSchema(
    name="census-income",
    columns=(
        "age", "class of worker", "detailed industry recode", "detailed occupation recode",
        "education", "wage per hour", "enroll in edu inst last wk", "marital stat",
        "major industry code", "major occupation code", "race", "hispanic origin", "sex",
        "member of a labor union", "reason for unemployment",
        "full or part time employment stat", "capital gains", "capital losses",
        "dividends from stocks", "tax filer stat", "region of previous residence",
        "state of previous residence", "detailed household and family stat",
        "detailed household summary in household", "instance weight",
        "migration code-change in msa", "migration code-change in reg",
        "migration code-move within reg", "live in this house 1 year ago",
        "migration prev res in sunbelt", "num persons worked for employer",
        "family members under 18", "country of birth father", "country of birth mother",
        "country of birth self", "citizenship", "own business or self employed",
        "fill inc questionnaire for veteran's admin", "veterans benefits",
        "weeks worked in year", "year", "income",
    ),
    numeric=frozenset(
        {
            "age", "wage per hour", "capital gains", "capital losses", "dividends from stocks",
            "num persons worked for employer", "weeks worked in year",
        }
    ),
    ignored=frozenset({"instance weight"}),
    positive_labels=frozenset({"50000+"}),
    negative_labels=frozenset({"- 50000"}),
)


@dataclass(frozen=True)
class Column:
    """A factorized column: ``levels[codes[i]]`` is the (stripped) value of row ``i``.

    Attributes:
        codes: int64 [N] index of each row's value in ``levels``.
        levels: the distinct values, in order of first appearance.
    """

    codes: np.ndarray
    levels: tuple[str, ...]

    def values(self) -> list[str]:
        """The column as a list of strings."""
        return [self.levels[c] for c in self.codes.tolist()]


@dataclass(frozen=True)
class RawTable:
    """The parsed rows of a UCI CSV file, column by column.

    Attributes:
        source: where the rows came from (for error messages).
        columns: feature column name → factorized values (ignored and label columns left out).
        labels: int64 [N] class indices (1 for the schema's positive labels, else 0).
        line_numbers: int64 [N] the 1-based line of each row in the file (for error messages),
            or ``None`` when not known.
    """

    source: str
    columns: Mapping[str, Column]
    labels: np.ndarray
    line_numbers: np.ndarray | None = None

    def line_of(self, column: str, level: int) -> str:
        """Where value ``levels[level]`` of ``column`` first occurs: ``"line N"`` or ``"row N"``."""
        row = int(np.flatnonzero(self.columns[column].codes == level)[0])
        if self.line_numbers is None:
            return f"data row {row + 1}"
        return f"line {int(self.line_numbers[row])}"

    @property
    def num_rows(self) -> int:
        """The number of data rows."""
        return int(self.labels.shape[0])


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Building millions of small strings and lists triggers the cyclic GC over and over; none
    # of them is cyclic, so pausing it makes parsing several times faster.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _factorize(values: Sequence[str]) -> Column:
    """Codes and stripped levels of ``values``, in one hashing pass over the rows."""
    index: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=len(values))
    stripped: dict[str, int] = {}
    remap = np.fromiter(
        (stripped.setdefault(raw.strip(), len(stripped)) for raw in index),
        dtype=np.int64,
        count=len(index),
    )
    return Column(codes=remap[codes], levels=tuple(stripped))


def parse_uci_csv(text: str, schema: UciSchema, *, source: str) -> RawTable:
    """Parse the text of a UCI CSV file.

    Blank lines and lines starting with ``|`` (comments) are skipped; values are stripped; a
    trailing ``.`` on the label is dropped.

    Raises:
        DataFormatError: a row with the wrong number of fields or an unknown label (the message
            names the line), or a file with no data rows.
    """
    width = len(schema.columns)
    lines = text.splitlines()
    with _gc_paused():
        numbered = [(lineno, line) for lineno, line in enumerate(lines, start=1) if _is_data(line)]
        rows = [line.split(",") for _, line in numbered]
        line_numbers = np.fromiter((lineno for lineno, _ in numbered), dtype=np.int64, count=len(numbered))
        del numbered
        if not rows:
            raise DataFormatError(f"{source}: no data rows")
        try:
            by_column = list(zip(*rows, strict=True))
        except ValueError:
            by_column = []
        if len(by_column) != width or len(rows[0]) != width:
            lineno, count = _first_bad_width(lines, width)
            raise DataFormatError(
                f"{source}, line {lineno}: {count} comma-separated fields, expected "
                f"{width} for {schema.name} ({', '.join(schema.columns[:3])}, …)"
            )
        del rows
        wanted = set(schema.numeric_columns) | set(schema.categorical_columns)
        columns = {
            name: _factorize(by_column[i]) for i, name in enumerate(schema.columns) if name in wanted
        }
        label_column = _factorize(by_column[-1])
    del by_column
    known = schema.positive_labels | schema.negative_labels
    names = [level.removesuffix(".") for level in label_column.levels]
    unknown = [level for level, name in zip(label_column.levels, names, strict=True) if name not in known]
    if unknown:
        lineno = _first_line_with_label(lines, width, unknown[0])
        raise DataFormatError(
            f"{source}, line {lineno}: unknown label {unknown[0]!r}; expected one of "
            f"{sorted(known)} (optionally followed by '.')"
        )
    positive = np.array([name in schema.positive_labels for name in names], dtype=np.int64)
    return RawTable(source=source, columns=columns, labels=positive[label_column.codes], line_numbers=line_numbers)


def _is_data(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("|")


def _first_bad_width(lines: Sequence[str], width: int) -> tuple[int, int]:
    for lineno, line in enumerate(lines, start=1):
        if _is_data(line) and line.count(",") + 1 != width:
            return lineno, line.count(",") + 1
    raise AssertionError("unreachable: a row of the wrong width was seen")


def _first_line_with_label(lines: Sequence[str], width: int, label: str) -> int:
    for lineno, line in enumerate(lines, start=1):
        if _is_data(line) and line.split(",")[width - 1].strip() == label:
            return lineno
    raise AssertionError("unreachable: an unknown label was seen")


def read_uci_csv(path: str | Path, schema: UciSchema, *, content: bytes | None = None) -> RawTable:
    """Read a UCI CSV file (gzipped or not); see :func:`parse_uci_csv`.

    Args:
        path: the file.
        schema: its columns.
        content: the file's already-read (decompressed) bytes, to avoid reading it twice.

    Raises:
        DataFormatError: unreadable, not UTF-8/ASCII text, or malformed (see :func:`parse_uci_csv`).
    """
    path = Path(path)
    data = read_content(path) if content is None else content
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}: not a text file ({exc})") from exc
    return parse_uci_csv(text, schema, source=str(path))
