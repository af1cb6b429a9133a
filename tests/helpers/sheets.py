"""Reading a built file the way the tests look at it: its charts' series, its formulas, a
'Sheet'!$A$1 reference, the cells of a range, and the portable set of functions every
formula keeps to."""

import re
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import openpyxl
from openpyxl.worksheet.formula import ArrayFormula

from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.refs import parse_range

_REF = re.compile(r"\$?([A-Z]+)\$?(\d+)(?::\$?([A-Z]+)\$?(\d+))?$")
CHART_NS = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"


def cells_in(ref: str) -> int:
    """Cells of a reference such as $B5:$D5 or F$5:F$9 or C7."""
    match = _REF.match(ref.strip())
    assert match, ref
    c0, r0, c1, r1 = match.groups()
    if c1 is None:
        return 1
    col = openpyxl.utils.column_index_from_string
    return (abs(int(r1) - int(r0)) + 1) * (abs(col(c1) - col(c0)) + 1)


def charts_in(path: Path) -> list[list[dict]]:
    """Every chart of the file, in the order of its parts: [{tx, x, y}] per series, the
    references each series reads (name, categories or x values, values)."""
    with zipfile.ZipFile(path) as book:
        names = sorted((n for n in book.namelist() if re.match(r"xl/charts/chart\d+\.xml", n)),
                       key=lambda n: int(re.search(r"(\d+)\.xml", n).group(1)))
        roots = [ElementTree.fromstring(book.read(name)) for name in names]
    charts = []
    for root in roots:
        found = []
        for ser in root.iter(f"{CHART_NS}ser"):
            def ref(*tags, ser=ser):
                for tag in tags:
                    node = ser.find(f"{CHART_NS}{tag}")
                    if node is not None:
                        return node.find(f".//{CHART_NS}f").text
                return None
            found.append({"tx": ref("tx"), "x": ref("xVal", "cat"), "y": ref("yVal", "val")})
        charts.append(found)
    return charts


def chart_series(path: Path) -> list[dict]:
    """The series of the file's first chart."""
    return charts_in(path)[0]


def parse_ref(ref: str):
    """'Sheet'!$A$1:$B$2 -> (sheet, (top, left, bottom, right))."""
    sheet, _, cells = ref.rpartition("!")
    return sheet.strip("'"), parse_range(cells)


def formulas_of(path: Path):
    """(sheet!cell or sheet!range, formula text, is an array formula) for every formula."""
    wb = openpyxl.load_workbook(path)
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for cell in row:
                if isinstance(cell.value, ArrayFormula):
                    yield f"{ws.title}!{cell.value.ref}", cell.value.text, True
                elif cell.data_type == "f":  # a formula, not a text starting with "="
                    yield f"{ws.title}!{cell.coordinate}", cell.value, False


# ../shared/DESIGN.md, "Formula style": the portable set
ALLOWED = {"SUMPRODUCT", "MMULT", "TRANSPOSE", "EXP", "LN", "SQRT", "MAX", "MIN", "SUM", "IF",
           "AND", "OR", "ABS", "TANH", "SIN", "COS", "PI", "POWER", "INDEX",
           # exercise self-checks: in every Excel since 2.0, LibreOffice and `formulas`; the
           # only way to count a student's text or #DIV/0! as wrong instead of erroring
           "ISNUMBER",
           # a floor: flash's cost table (its key blocks T = ⌈n/B⌉ at n = 1k, 4k, 32k, exact
           # integers) and T5's log buckets (relative-position). LibreOffice's INT snaps
           # values within ~1e-15 of a whole number: the sheets floor only exact integers or
           # float32 values, whole or ≥ 2^-24 relative away; tests/test_portability.py and
           # tests/test_relative_position.py show the engines agree there, negatives included
           "INT",
           # scaling's summary: the median row's ‖J_i‖_F (the mean is carried by the few
           # rows whose top scores nearly tie); in every Excel, LibreOffice and `formulas`
           # (test_scaling.py shows the two agree, negative and even-count arguments included)
           "MEDIAN",
           # the exact GELU, 0.5·x·(1 + erf(x/√2)), as BERT computes it (encoder-block
           # --gelu exact); in Excel 2010+ (older Excel refused negative arguments),
           # LibreOffice, Gnumeric and `formulas` (tests/test_encoder_block.py shows the three
           # engines agree with math.erf, at negative, zero and |x| > 5)
           "ERF"}


_STRING = re.compile(r'"[^"]*"')


_FUNCTION = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*)\s*\(")


_SPILL = re.compile(r"[A-Z]+\$?\d+#")


_UNSIGNED_EXPONENT = re.compile(r"(?<![A-Za-z_$])\d+(?:\.\d*)?[eE]\d")


_INDEX = re.compile(r"INDEX\(([^()]*)\)")


def portability_problems(text: str, is_array: bool) -> list[str]:
    bare = _STRING.sub('""', text)
    problems = [f"function {name} is not in the portable set"
                for name in _FUNCTION.findall(bare) if name.upper() not in ALLOWED]
    if "TRANSPOSE(" in bare.upper() and not is_array:
        problems.append("TRANSPOSE outside an array formula needs Ctrl+Shift+Enter in old Excel")
    if _SPILL.search(bare):
        problems.append("spilled range reference")
    if _UNSIGNED_EXPONENT.search(bare):
        problems.append("exponent literal without a sign (write 1E+30)")
    for args in _INDEX.findall(bare):
        parts = [a.strip() for a in args.split(",")]
        if len(parts) != 3 or "0" in parts[1:]:
            problems.append("INDEX needs both a row and a column index")
    return problems


def assert_steps_are_formulas(path, input_names):
    """Every cell of every named non-input block is computed by a formula."""
    wb = openpyxl.load_workbook(path)
    ws = wb.worksheets[0]
    arrays = [parse_range(c.value.ref) for row in ws.iter_rows() for c in row
              if isinstance(c.value, openpyxl.worksheet.formula.ArrayFormula)]
    for name in wb.defined_names:
        if name in input_names:
            continue
        where = find_name(wb, name, path)
        for r in range(where.top, where.bottom + 1):
            for c in range(where.left, where.right + 1):
                value = ws.cell(r, c).value
                in_array = any(t <= r <= b and lft <= c <= rgt for t, lft, b, rgt in arrays)
                assert in_array or (isinstance(value, str) and value.startswith("=")), \
                    (name, r, c, value)


def english_prose(text: str) -> str | None:
    """The English left in a cell, or None. A cell with Chinese may name things (LayerNorm,
    Step 2a, --causal) but holds no run of two lowercase English words; a cell without
    Chinese holds only names, equations and math words."""
    text = re.sub(r"[\w.]+=[^\s,;]*", " ", text)  # name=value pairs: parameter names
    text = re.sub(r"--[\w-]+(?: [\w|]+)?", " ", text)  # command-line flags and values
    if CJK.search(text):
        match = re.search(r"\b[a-z]{2,} [a-z]{2,}\b", text)
        return match.group(0) if match else None
    words = [w for w in re.findall(r"[A-Za-z]{3,}", text)
             if not w.isupper() and w.lower() not in MATH_WORDS]
    return " ".join(words) or None


CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


# words allowed in a cell with no Chinese: function names and symbols of equations, labels
MATH_WORDS = set("""exp max min sum sqrt tanh softmax rowmax rowsum softplus mask cos sin
concat head act lse out silu sigmoid pos elu relu gelu erf eps std attnsheets""".split())
