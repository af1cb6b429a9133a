"""Start-up: a command imports what it uses, and a command line naming one kind sets up
that kind's flags only, with the same parsing and help as when every kind is set up."""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.books import build

from workbook_builder.cli.app import _parser, main

# what no `check` or `--help` needs: the demo, the teacher's commands, checkpoints,
# tutorials, pandas, and the XML helpers that bring urllib and http along
NEVER_AT_START = ["workbook_builder.demo", "workbook_builder.teaching.classroom",
                  "workbook_builder.teaching.grade", "workbook_builder.teaching.reproduce",
                  "workbook_builder.teaching.record", "workbook_builder.models.loader",
                  "pandas", "xml.sax.saxutils", "urllib.request"]

ROOT = Path(__file__).resolve().parent.parent
_RUN_AND_LIST_MODULES = """
import contextlib, io, json, sys
from workbook_builder.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _modules_after(*args: str) -> tuple[int, set[str]]:
    """The exit code of `attnsheets ARGS` in a new process (this checkout's package), and
    every module it imported."""
    ran = subprocess.run([sys.executable, "-c", _RUN_AND_LIST_MODULES, *args], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    return result["code"], set(result["modules"])


def _kind_modules(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith("sheets.") and not m.startswith("sheets._")}


def _kind_modules_importing(module: str) -> set[str]:
    """The kind modules that importing `module` alone brings (the kinds it builds on)."""
    ran = subprocess.run([sys.executable, "-c", f"import json, sys, {module}; "
                          f"print(json.dumps(sorted(sys.modules)))"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return _kind_modules(set(json.loads(ran.stdout)))


def test_help_imports_no_kind_no_engine_and_nothing_of_the_other_commands():
    code, modules = _modules_after("--help")
    assert code == 0
    assert _kind_modules(modules) == set()
    assert "formulas" not in modules and "numpy.random" not in modules
    assert [m for m in NEVER_AT_START if m in modules] == []


def test_check_imports_the_files_kind_alone(tmp_path):
    path = build(tmp_path, "cross-attention", {"src_len": 3, "tgt_len": 2, "d_model": 2,
                                               "d_k": 2})
    code, modules = _modules_after("check", str(path))
    assert code == 0
    assert _kind_modules(modules) == _kind_modules_importing("sheets.cross_attention")
    assert [m for m in NEVER_AT_START if m in modules] == []


def test_build_imports_the_kind_it_builds_alone(tmp_path):
    code, modules = _modules_after("build", "ssm", "--seq-len", "3", "-o",
                                   str(tmp_path / "s.xlsx"))
    assert code == 0 and (tmp_path / "s.xlsx").exists()
    assert _kind_modules(modules) == _kind_modules_importing("sheets.ssm")
    assert _kind_modules(modules) == {"sheets.ssm"}  # a kind imports no other kind
    assert [m for m in NEVER_AT_START if m in modules] == []


# what `--help`, `list` and `--version` never need: the arrays, the workbook reader and
# writer, the engines, the models, the kinds and the machinery that brings them
HEAVY = ["numpy", "openpyxl", "formulas", "scipy", "pandas", "torch", "transformers",
         "workbook_builder.api"]


@pytest.mark.parametrize("argv", [["--help"], ["list"], ["--version"]])
def test_help_list_and_version_import_nothing_heavy(argv):
    code, modules = _modules_after(*argv)
    assert code == 0
    assert [m for m in HEAVY if m in modules] == []
    assert _kind_modules(modules) == set()


def test_the_kinds_listed_without_importing_them_are_the_kinds_with_their_summaries():
    from workbook_builder.checking.check import ENGINES
    from workbook_builder.cli import kind_table
    from workbook_builder.registry import load_kinds

    kinds = load_kinds()
    assert kind_table.KIND_SUMMARIES == {name: kind.summary for name, kind in kinds.items()}, \
        "a kind was added or its summary changed: update cli/kind_table.py"
    assert {name: kind.__module__ for name, kind in kinds.items()} == \
        {name: f"sheets.{kind_table.kind_module(name)}" for name in kinds}
    assert kind_table.listed_here()  # so `list` reads the table, importing no kind
    assert kind_table.ENGINE_NAMES == tuple(ENGINES)


def test_list_prints_each_kind_with_the_summary_its_class_gives():
    from workbook_builder.registry import load_kinds

    kinds = load_kinds()
    width = max(map(len, kinds))
    expected = "".join(f"{name:<{width}}  {kinds[name].summary}\n" for name in sorted(kinds))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["list"]) == 0
    assert out.getvalue() == expected


def test_a_kind_module_the_table_does_not_name_is_listed_from_the_kinds(monkeypatch):
    from workbook_builder.cli import kind_table
    from workbook_builder.registry import load_kinds

    stale = {name: summary for name, summary in kind_table.KIND_SUMMARIES.items()
             if name != "ssm"}
    monkeypatch.setattr(kind_table, "KIND_SUMMARIES", stale)
    assert not kind_table.listed_here()
    assert kind_table.kind_summaries() == {name: kind.summary for name, kind
                                        in sorted(load_kinds().items())}


def test_a_check_imports_neither_scipy_nor_tqdm_which_it_never_uses(tmp_path):
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    code, modules = _modules_after("check", str(path))
    assert code == 0
    assert [m for m in modules if m.split(".")[0] in ("scipy", "tqdm")] == []


_STATISTICS_IN_A_NEW_PROCESS = """
import json, sys
from workbook_builder.engines.internals import of_formulas

engine = of_formulas.formulas_engine()
scipy_at_start = "scipy" in sys.modules
kurtosis = float(engine.Parser().ast("=KURT(1,2,4,7,11)")[1].compile()())
from scipy import stats

print(json.dumps({"scipy_at_start": scipy_at_start, "kurtosis": kurtosis,
                  "scipy": float(stats.kurtosis([1, 2, 4, 7, 11], bias=False))}))
"""


def test_the_engines_statistics_import_scipy_when_first_used_and_give_its_numbers():
    ran = subprocess.run([sys.executable, "-c", _STATISTICS_IN_A_NEW_PROCESS], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    result = json.loads(ran.stdout.strip().splitlines()[-1])
    assert not result["scipy_at_start"]
    assert result["kurtosis"] == result["scipy"]


def _printed(parser, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args(argv)
    return out.getvalue()


COMMAND_LINES = {
    "build": ["build", "multihead", "--seq-len", "3", "--heads", "2", "-o", "x.xlsx"],
    "class": ["class", "multihead", "--seq-len", "3", "--roster", "r.csv", "--out", "d",
              "--exercise", "WEIGHTS"],
}


@pytest.mark.parametrize("command", sorted(COMMAND_LINES))
def test_a_kind_named_alone_parses_and_helps_as_among_every_kind(command):
    argv = COMMAND_LINES[command]
    every_kind = _parser([command])  # as for `attnsheets build --help`: all kinds
    assert vars(_parser(argv).parse_args(argv)) == vars(every_kind.parse_args(argv))
    help_argv = [command, "multihead", "--help"]
    assert _printed(_parser(help_argv), help_argv) == _printed(every_kind, help_argv)
    listed = _printed(every_kind, [command, "--help"])
    assert "cross-attention" in listed and "ssm" in listed


def test_an_unknown_kind_is_refused_naming_every_kind():
    argv = ["build", "atention", "-o", "x.xlsx"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
        _parser(argv).parse_args(argv)
    assert exited.value.code == 2
    assert "invalid choice: 'atention'" in err.getvalue()
    assert "'cross-attention'" in err.getvalue() and "'ssm'" in err.getvalue()


@pytest.mark.parametrize("text", ["plain", "a<b & c>d", "&amp; stays escaped once", "\"'", ""])
def test_the_xml_escape_of_stored_text_is_the_standard_librarys(text):
    from xml.sax.saxutils import escape

    from workbook_builder.engines.cached_values import escape_xml

    assert escape_xml(text) == escape(text)


@pytest.mark.parametrize("outcome", ["returns", "raises"])
def test_a_command_runs_with_fewer_collections_and_the_collector_is_put_back(monkeypatch,
                                                                             outcome):
    import gc

    from workbook_builder.cli import app
    from workbook_builder.errors import UserError

    during = []

    def command(args):
        during.append(gc.get_threshold())
        if outcome == "raises":
            raise UserError("refused")
        return 0

    monkeypatch.setitem(app.COMMANDS, "list", command)
    before = gc.get_threshold()
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["list"]) == (0 if outcome == "returns" else 2)
    assert during == [(app.YOUNG_OBJECTS_PER_COLLECTION, *before[1:])]
    assert gc.get_threshold() == before  # main() may be called by a host program
