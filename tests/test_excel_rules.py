"""Excel's rules for the file format, on every kind of file attnsheets writes (the demo, both
languages, every layout, a class, `reproduce`, the presets, checkpoint layers: see
tests/excel_files.py): Microsoft's Open XML SDK validator finds no error, and the project's
lint (workbook_builder/checking/xlsx_lint.py) nothing of what the validator does not check.
One validator run reads them all, with broken copies beside them that it must refuse."""

import os
import re
import subprocess
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from helpers.excel_files import write_every_kind_of_file
from helpers.runs import once_per_run

from workbook_builder.checking.xlsx_lint import MAX_TEXT, lint_workbook

pytestmark = pytest.mark.slow  # every kind of file written, through the validator

SETUP = ("apt-get install mono-devel && ../shared/tools/ooxml-validator/setup-validator.sh "
         "~/.cache/attnsheets/ooxml-validator")


def validator_home() -> Path:
    """Where the validator is built: $OXV_HOME, or the cache folder .ci/run builds into."""
    home = os.environ.get("OXV_HOME")
    return Path(home) if home else Path.home() / ".cache" / "attnsheets" / "ooxml-validator"


def require_validator() -> Path:
    """The validator's program; skips (fails under CI) where it is not built."""
    program = validator_home() / "OxValidate"
    if not os.access(program, os.X_OK):
        message = f"the Open XML SDK validator is not built in {program.parent} ({SETUP})"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return program


VERSION = "DocumentFormat.OpenXml 3.3.0"  # and the rules of Microsoft 365, as README says


def run_validator(program: Path, paths: list[Path]) -> str:
    """One validator run over every file: its report."""
    env = dict(os.environ, OXV_VERSION="Microsoft365", OXV_MAX="100",
               DOTNET_SYSTEM_GLOBALIZATION_INVARIANT="1", DOTNET_CLI_TELEMETRY_OPTOUT="1")
    # .NET reserves 256 GB of address space for its heap unless told a range: 2 GB, so that
    # it also starts under a memory limit (ulimit -v)
    env.setdefault("DOTNET_GCRegionRange", "0x80000000")
    ran = subprocess.run([str(program), *map(str, paths)], capture_output=True, text=True,
                         env=env, timeout=1800)
    assert ran.returncode in (0, 1), ran.stdout[-2000:] + ran.stderr[-2000:]
    return ran.stdout


def errors_by_file(report: str, paths: list[Path]) -> dict[Path, list[str]]:
    """Each file's errors in a validator report, one "part xpath: description" line each."""
    summary = re.search(r"^SUMMARY files=.*", report, re.M)
    assert summary, report[-2000:]
    assert f"validator {VERSION}.0, Microsoft365)" in summary.group(0), summary.group(0)
    errors: dict[Path, list[str]] = {}
    current, error = None, {}
    for line in report.splitlines():
        verdict = re.match(r"(OK|INVALID|FAILED) +(.+?)(?: : (.*))?$", line)
        if verdict:
            current = Path(verdict.group(2))
            errors[current] = [verdict.group(3)] if verdict.group(1) == "FAILED" else []
            continue
        field = re.match(r"\s+(part|xpath|desc):\s*(.*)", line)
        if field and current is not None:
            error[field.group(1)] = field.group(2)
            if field.group(1) == "desc":
                errors[current].append(f"{error.get('part')} {error.get('xpath')}: "
                                       f"{error['desc']}")
                error = {}
    assert sorted(errors) == sorted(paths), "the validator did not report every file"
    return errors


# -- the files ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def written(demo, tutorial, tmp_path_factory) -> list[Path]:
    """Every kind of file, written once per test run (shared by pytest-xdist's workers)."""
    folder = once_per_run(tmp_path_factory, "excel_files", write_every_kind_of_file)
    return demo.books + tutorial.books + sorted(folder.rglob("*.xlsx"))


def rewritten(source: Path, target: Path, part: str, change) -> Path:
    """A copy of `source` whose `part` is `change(text)` (which must change it)."""
    with zipfile.ZipFile(source) as book, zipfile.ZipFile(target, "w",
                                                          zipfile.ZIP_DEFLATED) as copy:
        for info in book.infolist():
            data = book.read(info.filename)
            if info.filename == part:
                text = data.decode("utf-8")
                changed = change(text)
                assert changed != text, f"{target.name}: the change did not apply"
                data = changed.encode("utf-8")
            copy.writestr(info, data)
    return target


def openpyxl_font_order(styles: str) -> str:
    """styles.xml with each font's <name> first, as openpyxl writes it."""
    return re.sub(r"<font>((?:(?!</font>).)*?)(<name val=\"[^\"]*\"/>)", r"<font>\2\1",
                  styles)


# broken copy: (source in the demo, part, change, the part its error is in)
BROKEN = {
    "fonts_as_openpyxl_writes_them": ("attention_cells.xlsx", "xl/styles.xml",
                                      openpyxl_font_order, "/xl/styles.xml"),
    "scatter_chart_without_style": ("scaling_cells.xlsx", "xl/charts/chart1.xml",
                                    lambda xml: xml.replace('<scatterStyle val="lineMarker"/>',
                                                            ""), "/xl/charts/chart1.xml"),
    "value_before_formula": ("attention_cells.xlsx", "xl/worksheets/sheet1.xml",
                             lambda xml: re.sub(r"(<f>[^<]*</f>)(<v>[^<]*</v>)", r"\2\1", xml,
                                                count=1), "/xl/worksheets/sheet1.xml"),
}


@pytest.fixture(scope="session")
def validator() -> Path:
    """Asked for first, so that a missing validator skips before any file is written."""
    return require_validator()


@pytest.fixture(scope="module")
def validated(validator, demo, written, tmp_path_factory) -> dict[Path, list[str]]:
    """Every written file and the broken copies, validated in one run (once per test run)."""
    broken = {name: f"{name}.xlsx" for name in BROKEN}

    def make(folder: Path) -> None:
        for name, (source, part, change, _) in BROKEN.items():
            rewritten(demo.out / source, folder / broken[name], part, change)
        report = run_validator(validator, written + [folder / file for file in broken.values()])
        (folder / "report.txt").write_text(report, encoding="utf-8")

    folder = once_per_run(tmp_path_factory, "validated", make)
    return errors_by_file((folder / "report.txt").read_text(encoding="utf-8"),
                          written + [folder / file for file in broken.values()])


# -- the validator -----------------------------------------------------------------------

def test_every_file_attnsheets_writes_passes_the_open_xml_validator(validator, written,
                                                                    validated):
    folders = Counter(path.parent.name if path.parent.name in ("demo", "books") else "others"
                      for path in written)
    assert folders["demo"] >= 80 and folders["books"] == 2 and folders["others"] >= 90, folders
    failed = {f"{path.parent.name}/{path.name}": errors for path, errors in validated.items()
              if path in written and errors}
    report = "\n".join(f"{name}: {len(errors)} errors, first {errors[0]}"
                       for name, errors in sorted(failed.items()))
    assert not failed, f"{len(failed)} of {len(written)} files invalid:\n{report}"


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_validator_refuses_a_broken_copy(validator, validated, name):
    """Each copy differs from a valid file in one place; the validator names that part."""
    errors = next(errors for path, errors in validated.items() if path.stem == name)
    assert errors, f"{name} passed the validator"
    assert all(error.startswith(BROKEN[name][3] + " ") for error in errors), errors


# -- the lint ----------------------------------------------------------------------------

def test_every_file_attnsheets_writes_passes_the_lint(written):
    problems = {f"{path.parent.name}/{path.name}": lint_workbook(path) for path in written}
    found = {name: found for name, found in problems.items() if found}
    assert not found, "\n".join(f"{name}: {p}" for name, ps in sorted(found.items()) for p in ps)


def _second_row_first(xml: str) -> str:
    rows = re.findall(r"<row r=\"\d+\".*?</row>", xml, re.S)
    return xml.replace(rows[0] + rows[1], rows[1] + rows[0], 1)


def _first_shared_string_too_long(xml: str) -> str:
    return re.sub(r"<si><t>[^<]*</t></si>", "<si><t>" + "x" * (MAX_TEXT + 1) + "</t></si>",
                  xml, count=1)


def _duplicate_first_name(xml: str) -> str:
    return re.sub(r"(<definedName [^>]*>[^<]*</definedName>)", r"\1\1", xml, count=1)


# broken copy of the demo's attention_cells.xlsx: (part, change, what the lint says)
LINT_CASES = {
    "formula_does_not_parse": ("xl/worksheets/sheet1.xml",
                               lambda xml: xml.replace("<f>MMULT(", "<f>MMULT((", 1),
                               "does not parse"),
    "formula_names_a_missing_sheet": ("xl/worksheets/sheet1.xml",
                                      lambda xml: xml.replace("<f>", "<f>Gone!A1+", 1),
                                      "sheet 'Gone'"),
    "reference_outside_the_sheet": ("xl/worksheets/sheet1.xml",
                                    lambda xml: xml.replace("<f>", "<f>XFE1+", 1),
                                    "outside the sheet"),
    "duplicate_defined_name": ("xl/workbook.xml", _duplicate_first_name, "defined twice"),
    "defined_name_is_a_cell": ("xl/workbook.xml",
                               lambda xml: xml.replace('definedName name="X"', 'definedName '
                                                       'name="XB1"', 1), "a cell reference"),
    "defined_name_on_a_missing_sheet": ("xl/workbook.xml",
                                        lambda xml: re.sub(r">'?Attention'?!", ">'Gone'!",
                                                           xml, count=1),
                                        "sheet 'Gone'"),
    # a merge from the first merged range's top-left cell down one more row overlaps it
    "overlapping_merges": ("xl/worksheets/sheet1.xml",
                           lambda xml: re.sub(r'<mergeCell ref="([A-Z]+)(\d+):[A-Z]+\d+"/>',
                                              lambda m: f'{m[0]}<mergeCell ref="{m[1]}{m[2]}:'
                                                        f'{m[1]}{int(m[2]) + 1}"/>',
                                              xml, count=1), "overlap"),
    "text_too_long": ("xl/worksheets/sheet2.xml",
                      lambda xml: re.sub(r'<is><t>[^<]*</t></is>',
                                         "<is><t>" + "x" * (MAX_TEXT + 1) + "</t></is>", xml,
                                         count=1), "more than 32,767"),
    "invalid_sheet_name": ("xl/workbook.xml",
                           lambda xml: xml.replace('name="About"', 'name="About/Info"', 1),
                           "sheet name 'About/Info'"),
    "rows_out_of_order": ("xl/worksheets/sheet1.xml", _second_row_first, "after row"),
    "vml_not_well_formed": ("xl/drawings/commentsDrawing1.vml",
                            lambda xml: xml.replace("</xml>", "", 1), "not well formed"),
    "comment_without_its_note": ("xl/drawings/commentsDrawing1.vml",
                                 lambda xml: re.sub(r"Row>\d+<", "Row>999<",
                                                    xml, count=1), "do not match"),
}


@pytest.mark.parametrize("name", sorted(LINT_CASES))
def test_the_lint_finds_each_problem_in_a_broken_copy(demo, tmp_path, name):
    source = demo.out / "attention_cells.xlsx"
    assert lint_workbook(source) == []
    part, change, said = LINT_CASES[name]
    broken = rewritten(source, tmp_path / f"{name}.xlsx", part, change)
    problems = lint_workbook(broken)
    assert any(said in problem for problem in problems), problems
