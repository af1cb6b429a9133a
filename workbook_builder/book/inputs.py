"""User-given input blocks: a JSON file of name -> nested lists, or NAME=file.csv."""

import csv
import json
import math
import re
from pathlib import Path

import numpy as np

from workbook_builder.book.reading import read_bounded, regular_file
from workbook_builder.errors import UserError

# 2,000,000 numbers at up to ~24 characters each, with commas, brackets and indentation:
# a larger inputs file is refused before it is parsed (parsing JSON takes several times
# the text's size in memory); a model's weights come from --checkpoint, read as a stream
MAX_INPUTS_BYTES = 64 * 2**20
_TOO_BIG = "a model's weights come with --checkpoint"


def load_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    """Each spec is `file.json` (several inputs) or `NAME=file.csv` (one headerless matrix)."""
    given: dict[str, np.ndarray] = {}
    for spec in specs:
        if "=" in spec and not spec.lower().endswith(".json"):
            name, _, path = spec.partition("=")
            blocks = {name.strip(): _read_csv(Path(path))}
        else:
            blocks = _read_json(Path(spec))
        for name, value in blocks.items():
            if name in given:
                raise UserError(f"input {name} is given twice")
            given[name] = value
    return given


class _DuplicateKey(ValueError):
    pass


def _refuse_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object as a dict; a key given twice is refused (json keeps the last one
    silently, so the first matrix would be lost without a word)."""
    data = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(f"the key {key!r} appears twice in one object")
        data[key] = value
    return data


def _read_json(path: Path) -> dict[str, np.ndarray]:
    text = read_bounded(path, MAX_INPUTS_BYTES, "inputs file", _TOO_BIG)
    try:
        data = json.loads(text.decode("utf-8"), object_pairs_hook=_refuse_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError, _DuplicateKey) as exc:
        raise UserError(f"{path}: not a readable JSON file ({exc})") from None
    except RecursionError:
        raise UserError(f"{path}: not a readable JSON file (nested too deeply; inputs are "
                        f"lists of rows)") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object mapping input names to matrices")
    return {str(name): _matrix(value, f"{path}: input {name}") for name, value in data.items()}


def _read_csv(path: Path) -> np.ndarray:
    """A headerless CSV of numbers, every row as long as the first."""
    size = regular_file(path, "CSV file").st_size
    if size > MAX_INPUTS_BYTES:
        raise UserError(f"{path} is {size / 2**20:,.0f} MB, more than the "
                        f"{MAX_INPUTS_BYTES // 2**20} MB attnsheets reads in one CSV file "
                        f"({_TOO_BIG})")
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows = [row for row in csv.reader(handle) if row]
    except FileNotFoundError:
        raise UserError(f"{path}: no such CSV file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{path}: not a readable CSV file ({exc})") from None
    if not rows:
        raise UserError(f"{path}: the CSV file holds no rows")
    for number, row in enumerate(rows, start=1):
        if len(row) != len(rows[0]):
            raise UserError(f"{path}: the CSV is ragged: row {number} has {len(row)} "
                            f"value(s), row 1 has {len(rows[0])}")
    _refuse_decimal_commas(path, rows)
    matrix = []
    for i, row in enumerate(rows, start=1):
        try:
            matrix.append([float(x) for x in row])
        except ValueError:
            j, text = next((j, x) for j, x in enumerate(row, start=1) if not _is_float(x))
            raise UserError(f"{path}: row {i}, column {j} holds {text.strip()!r}, not a "
                            f"number") from None
    return _matrix(matrix, f"{path}")


_WHOLE = re.compile(r"[+-]?\d+")
_DECIMAL_COMMA = re.compile(r"\d,\d")


def _refuse_decimal_commas(path: Path, rows: list[list[str]]) -> None:
    """A CSV written with decimal commas would otherwise change the matrix's shape: `0,5`
    per line is one column of halves to its author, two columns of whole numbers here.
    Values separated by semicolons or tabs, or every row two whole numbers with no decimal
    point anywhere in the file, are refused; one value written with a point (`5.0`) says
    the commas separate values."""
    fields = [x.strip() for row in rows for x in row]
    if any(";" in x or "\t" in x for x in fields) and any(_DECIMAL_COMMA.search(
            ",".join(row)) for row in rows):
        raise UserError(f"{path}: the values look separated by semicolons or tabs, with "
                        f"decimal commas (0,5); write them with decimal points, separated "
                        f"by commas (0.5,1.25)")
    if all(len(row) == 2 for row in rows) and all(_WHOLE.fullmatch(x) for x in fields) and \
            not any(row[1].strip()[:1] in "+-" for row in rows):
        raise UserError(f"{path}: every row is two whole numbers ({','.join(rows[0])}): if "
                        f"that is a decimal comma, write {'.'.join(rows[0])}; if they are "
                        f"two columns, write one of the values with a decimal point "
                        f"({rows[0][0]}.0,{rows[0][1]})")


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _matrix(value, what: str) -> np.ndarray:
    """A rectangular matrix of finite numbers; a flat list is one row."""
    if isinstance(value, list) and value and not isinstance(value[0], list):
        value = [value]
    ok = isinstance(value, list) and value and all(isinstance(r, list) and r for r in value)
    if not ok or len({len(r) for r in value}) != 1:
        raise UserError(f"{what} must be a rectangular list of rows of numbers")
    if any(isinstance(x, bool) or not isinstance(x, int | float) for r in value for x in r):
        raise UserError(f"{what} holds something that is not a number")
    try:
        array = np.asarray(value, dtype=float)
    except OverflowError:  # a whole number of 400 digits: beyond any double
        array = np.array([[math.inf]])
    if not np.all(np.isfinite(array)):
        raise UserError(f"{what} holds a value that is not a finite number")
    return array
