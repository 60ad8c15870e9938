"""UCI CSV parsing and the train-fitted tabular encoding, on tiny files in the UCI formats."""

from __future__ import annotations

import numpy as np
import pytest

from dpfl.data.tabular import TabularEncoder, signed_labels
from dpfl.data.uci import ADULT_SCHEMA, CENSUS_INCOME_SCHEMA, UciSchema, parse_uci_csv
from dpfl.errors import DataFormatError

ADULT_TRAIN = """\
39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, 2174, 0, \
40, United-States, <=50K
50, Self-emp-not-inc, 83311, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, White, Male, 0, 0, \
13, United-States, >50K
38, Private, 215646, HS-grad, 9, Divorced, ?, Not-in-family, White, Female, 0, 0, 40, ?, <=50K

"""
ADULT_TEST = """\
|1x3 Cross validator
25, Private, 226802, 11th, 7, Never-married, Machine-op-inspct, Own-child, Black, Male, 0, 0, 40, United-States, <=50K.
44, Private, 160323, Some-college, 10, Married-civ-spouse, Machine-op-inspct, Husband, Black, Male, 7688, 0, \
40, Peru, >50K.
"""


def test_adult_rows_labels_and_comment_line() -> None:
    train = parse_uci_csv(ADULT_TRAIN, ADULT_SCHEMA, source="adult.data")
    test = parse_uci_csv(ADULT_TEST, ADULT_SCHEMA, source="adult.test")
    assert train.num_rows == 3 and test.num_rows == 2
    assert train.labels.tolist() == [0, 1, 0]
    assert test.labels.tolist() == [0, 1]  # the trailing '.' of adult.test labels is dropped
    assert train.columns["workclass"].values() == ["State-gov", "Self-emp-not-inc", "Private"]
    assert "fnlwgt" not in train.columns  # the sampling weight is never a feature


def test_encoding_is_learned_on_train_only() -> None:
    train = parse_uci_csv(ADULT_TRAIN, ADULT_SCHEMA, source="adult.data")
    test = parse_uci_csv(ADULT_TEST, ADULT_SCHEMA, source="adult.test")
    enc = TabularEncoder.fit(train, ADULT_SCHEMA)
    names = enc.feature_names
    x_train, x_test = enc.transform(train), enc.transform(test)
    assert x_train.dtype == np.float32 and x_train.shape == (3, len(names)) == (3, enc.num_features)
    assert names[:5] == ADULT_SCHEMA.numeric_columns
    # Numerics: standardized with the training mean and (population) std.
    ages = np.array([39.0, 50.0, 38.0])
    np.testing.assert_allclose(x_train[:, 0], (ages - ages.mean()) / ages.std(), rtol=1e-6)
    np.testing.assert_allclose(x_test[:, 0], (np.array([25.0, 44.0]) - ages.mean()) / ages.std(), rtol=1e-6)
    # Categoricals: one indicator per training category; '?' and unseen test categories → zeros.
    country = [i for i, n in enumerate(names) if n.startswith("native-country=")]
    assert [names[i] for i in country] == ["native-country=United-States"]
    assert x_train[:, country].ravel().tolist() == [1.0, 1.0, 0.0]  # row 3 is '?'
    assert x_test[:, country].ravel().tolist() == [1.0, 0.0]  # 'Peru' never seen in training
    occupation = [i for i, n in enumerate(names) if n.startswith("occupation=")]
    assert x_test[:, occupation].sum() == 0  # 'Machine-op-inspct' unseen
    workclass = [i for i, n in enumerate(names) if n.startswith("workclass=")]
    assert (x_train[:, workclass].sum(axis=1) == 1).all()
    # A constant numeric column (capital-loss) gets std 1 instead of a division by zero.
    assert np.isfinite(x_train).all() and np.isfinite(x_test).all()


def test_signed_labels_for_the_svm() -> None:
    assert signed_labels(np.array([0, 1, 1, 0])).tolist() == [-1, 1, 1, -1]
    with pytest.raises(DataFormatError, match="binary class indices"):
        signed_labels(np.array([0, 2]))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("39, State-gov, 77516\n", r"adult.data, line 1: 3 comma-separated fields, expected 15"),
        (ADULT_TRAIN + "1, 2\n", r"line 5: 2 comma-separated fields"),
        (ADULT_TRAIN.replace("<=50K\n50", "maybe\n50", 1), r"line 1: unknown label 'maybe'"),
        ("|1x3 Cross validator\n\n", "no data rows"),
    ],
)
def test_malformed_uci_csv(text: str, message: str) -> None:
    with pytest.raises(DataFormatError, match=message):
        parse_uci_csv(text, ADULT_SCHEMA, source="adult.data")


def test_non_numeric_value_in_a_numeric_column() -> None:
    table = parse_uci_csv(ADULT_TRAIN.replace("39,", "old,", 1), ADULT_SCHEMA, source="adult.data")
    with pytest.raises(DataFormatError, match="numeric column 'age' holds 'old'"):
        TabularEncoder.fit(table, ADULT_SCHEMA)


@pytest.mark.parametrize(
    ("line", "old", "new", "column"),
    [
        (2, "50,", "nan,", "age"),
        (3, "38,", "inf,", "age"),
        (1, " 2174,", " 1e308,", "capital-gain"),
        (2, " 13, United", " -Infinity, United", "hours-per-week"),
        (3, " 9, Divorced", " 1e39, Divorced", "education-num"),
    ],
)
def test_non_finite_or_overflowing_value_names_file_line_and_column(line: int, old: str, new: str,
                                                                    column: str) -> None:
    lines = ADULT_TRAIN.splitlines()
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    table = parse_uci_csv("\n".join(lines), ADULT_SCHEMA, source="adult.data")
    value = new.strip(" ,").split(",")[0]
    with pytest.raises(DataFormatError, match=rf"^adult\.data, line {line}: numeric column '{column}' holds '{value}'"):
        TabularEncoder.fit(table, ADULT_SCHEMA)


def test_bad_value_in_the_test_file_is_blamed_on_the_test_file() -> None:
    train = parse_uci_csv(ADULT_TRAIN, ADULT_SCHEMA, source="adult.data")
    test = parse_uci_csv(ADULT_TEST.replace("44,", "inf,", 1), ADULT_SCHEMA, source="adult.test")
    encoder = TabularEncoder.fit(train, ADULT_SCHEMA)
    with pytest.raises(DataFormatError, match=r"^adult\.test, line 3: numeric column 'age' holds 'inf'"):
        encoder.transform(test)


def test_census_income_schema_follows_the_uci_description() -> None:
    schema: UciSchema = CENSUS_INCOME_SCHEMA
    assert len(schema.columns) == 42
    assert schema.columns[24] == "instance weight" and schema.columns[-1] == "income"
    assert "instance weight" not in schema.numeric_columns + schema.categorical_columns
    assert len(schema.numeric_columns) == 7  # "7 continuous, 33 nominal" (census-income.names)
    assert len(schema.categorical_columns) == 33
    # Integer-coded nominal attributes are categorical, not numbers.
    for coded in ("detailed industry recode", "detailed occupation recode", "own business or self employed",
                  "veterans benefits", "year"):
        assert coded in schema.categorical_columns


def test_census_income_row_and_labels() -> None:
    row = (
        "73, Not in universe, 0, 0, High school graduate, 0, Not in universe, Widowed, Not in universe or "
        "children, Not in universe, White, All other, Female, Not in universe, Not in universe, Not in labor "
        "force, 0, 0, 0, Nonfiler, Not in universe, Not in universe, Other Rel 18+ ever marr not in subfamily, "
        "Other relative of householder, 1700.09, ?, ?, ?, Not in universe under 1 year old, ?, 0, Not in "
        "universe, United-States, United-States, United-States, Native- Born in the United States, 0, Not in "
        "universe, 2, 0, 95, {label}"
    )
    text = "\n".join([row.format(label="- 50000."), row.format(label="50000+.")]) + "\n"
    table = parse_uci_csv(text, CENSUS_INCOME_SCHEMA, source="census.csv")
    assert table.labels.tolist() == [0, 1]
    enc = TabularEncoder.fit(table, CENSUS_INCOME_SCHEMA)
    assert not any(n.startswith("instance weight") for n in enc.feature_names)
    assert "detailed industry recode=0" in enc.feature_names
    assert "citizenship=Native- Born in the United States" in enc.feature_names  # values are stripped
