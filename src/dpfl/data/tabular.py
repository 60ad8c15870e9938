"""Tabular preprocessing learned on the training split: one-hot categoricals, standardized numerics.

- A categorical column becomes one indicator per category seen in the training split (sorted);
  a missing value (``?``) or a category never seen in training encodes as all zeros.
- A numeric column is standardized with the training mean and standard deviation (a constant
  column gets std 1); a missing numeric value is imputed with the training mean, i.e. 0.
- Labels stay class indices {0, 1}; :func:`signed_labels` maps them to {−1, +1} for the SVM loss
  of 000_3304bf6f36c753f8.txt eq. (32).

This module imports nothing from dpfl except :mod:`dpfl.errors` and :mod:`dpfl.data.uci`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpfl.data.uci import MISSING, RawTable, UciSchema
from dpfl.errors import DataFormatError


@dataclass(frozen=True)
class TabularEncoder:
    """A fitted encoder; build it with :meth:`fit` on the training split.

    Attributes:
        schema: the columns.
        categories: per categorical column (schema order), the categories seen in training.
        mean: float64 [n_numeric] training means.
        std: float64 [n_numeric] training standard deviations (1 where the column is constant).
    """

    schema: UciSchema
    categories: tuple[tuple[str, ...], ...]
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, table: RawTable, schema: UciSchema) -> TabularEncoder:
        """Learn categories and numeric statistics from the training ``table``.

        Raises:
            DataFormatError: a numeric column holds a non-number, or has no value at all.
        """
        categories = tuple(
            tuple(sorted(set(table.columns[c].levels) - {MISSING}))
            for c in schema.categorical_columns
        )
        means, stds = [], []
        for column in schema.numeric_columns:
            values = _numeric(table, column)
            present = values[~np.isnan(values)]
            if present.size == 0:
                raise DataFormatError(
                    f"{table.source}: numeric column {column!r} has no value (all {MISSING!r})"
                )
            std = float(present.std())
            means.append(float(present.mean()))
            stds.append(std if std > 0 else 1.0)
        return cls(schema, categories, np.asarray(means), np.asarray(stds))

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Names of the output columns: numerics first, then ``column=category`` indicators."""
        names = list(self.schema.numeric_columns)
        for column, cats in zip(self.schema.categorical_columns, self.categories, strict=True):
            names.extend(f"{column}={cat}" for cat in cats)
        return tuple(names)

    @property
    def num_features(self) -> int:
        """The width of the encoded matrix."""
        return len(self.schema.numeric_columns) + sum(len(c) for c in self.categories)

    def transform(self, table: RawTable) -> np.ndarray:
        """Encode ``table`` as float32 [N, num_features].

        Raises:
            DataFormatError: a numeric column holds a non-number.
        """
        n = table.num_rows
        out = np.zeros((n, self.num_features), dtype=np.float32)
        rows = np.arange(n)
        col = 0
        for j, column in enumerate(self.schema.numeric_columns):
            numbers = _numeric(table, column)
            numbers = np.where(np.isnan(numbers), self.mean[j], numbers)
            out[:, col] = (numbers - self.mean[j]) / self.std[j]
            col += 1
        for column, cats in zip(self.schema.categorical_columns, self.categories, strict=True):
            index = {cat: i for i, cat in enumerate(cats)}
            values = table.columns[column]
            lookup = np.array([index.get(level, -1) for level in values.levels], dtype=np.int64)
            codes = lookup[values.codes]
            seen = codes >= 0
            out[rows[seen], col + codes[seen]] = 1.0
            col += len(cats)
        return out


MAX_ABS_VALUE = float(np.finfo(np.float32).max)
"""The largest magnitude a numeric value may have: features are float32."""


def _numeric(table: RawTable, column: str) -> np.ndarray:
    """A numeric column as float64, NaN where missing (``?``).

    Raises:
        DataFormatError: a value that is not a number, not finite (``nan``, ``inf``) or beyond
            float32's range; the message names the file, the line, the column and the value.
    """
    values = table.columns[column]
    lookup = np.empty(len(values.levels), dtype=np.float64)
    for i, level in enumerate(values.levels):
        if level == MISSING:
            lookup[i] = np.nan
            continue
        try:
            number = float(level)
        except ValueError:
            raise DataFormatError(
                f"{table.source}, {table.line_of(column, i)}: numeric column {column!r} holds "
                f"{level!r}, not a number"
            ) from None
        if not np.isfinite(number) or abs(number) > MAX_ABS_VALUE:
            what = ("not a finite number" if not np.isfinite(number)
                    else f"beyond float32's range (±{MAX_ABS_VALUE:.3g})")
            raise DataFormatError(
                f"{table.source}, {table.line_of(column, i)}: numeric column {column!r} holds "
                f"{level!r}, {what}; a missing value is written {MISSING!r}"
            )
        lookup[i] = number
    return lookup[values.codes]


def signed_labels(labels: np.ndarray) -> np.ndarray:
    """Map binary class indices {0, 1} to {−1, +1} (int64), as the SVM of 000 eq. (32) expects.

    Raises:
        DataFormatError: a label outside {0, 1}.
    """
    labels = np.asarray(labels)
    if labels.size and not np.isin(labels, (0, 1)).all():
        raise DataFormatError(
            f"signed labels need binary class indices in {{0, 1}}; found values {np.unique(labels)[:5].tolist()}"
        )
    return labels.astype(np.int64) * 2 - 1
