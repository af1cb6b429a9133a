"""Each library's internals behind one door: only workbook_builder/xlsx/of_openpyxl.py touches
what `openpyxl` does not publish, and only workbook_builder/engines/internals/ what `formulas`
and `schedula` do not; every other module of workbook_builder/, sheets/ and reference/ is
read (its syntax tree, not its text) and may use only their public names.

What counts as public, per library:
- formulas: the package itself and the names it exports (`formulas.__all__`: Parser,
  ExcelModel, get_functions, Ranges, XlError, the error values, ...) and `__version__`.
  Its submodules (formulas.cell, formulas.functions, formulas.ranges, ...) are not
  documented as an interface and change between releases.
- schedula: the package itself and the names it exports (`schedula.__all__`: Dispatcher,
  DispatchPipe, SubDispatch, SELF, START, NONE, EMPTY, parent_func, ...).
- openpyxl: every module whose dotted path has no part starting with "_", the modules its
  API reference documents (openpyxl.readthedocs.io/en/3.1.x/api/, one page a module:
  openpyxl.styles, openpyxl.chart.*, openpyxl.utils, openpyxl.comments,
  openpyxl.worksheet.worksheet, openpyxl.workbook.defined_name, openpyxl.reader.excel,
  ...); `openpyxl.cell._writer` and `openpyxl.worksheet._reader` are not among them.
- For all three, no name starting with one "_" (dunders such as `__version__` are public).

The rules, outside the doors:
1. no import of a module that is not public, nor of a name that is not public from one
   (`import x.y`, `from x.y import z`, `importlib.import_module("x.y")`);
2. no attribute of a library module that is not public (`formulas.cell.Cell`,
   `openpyxl.worksheet._reader`), however the module was imported or renamed;
3. no underscored attribute the project does not define itself, on any object
   (`ws._cells`, `cell._style`, `wb._fonts`; through getattr/setattr/hasattr/vars() too):
   what the project does not define must come from someone else. The standard library's
   documented underscored names (a namedtuple's `_replace`, `sys._getframe`) are allowed;
4. in a module that imports one of the libraries, no underscored attribute that library
   defines, even where the project defines one of the same name (`ranges._value`).
"""

import ast
import functools
import importlib
import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("workbook_builder", "sheets", "reference")
LIBRARIES = ("formulas", "schedula", "openpyxl")
# each door (a package or a module) and the libraries whose internals it alone may use
DOORS = {("workbook_builder", "xlsx", "of_openpyxl.py"): ("openpyxl",),
         ("workbook_builder", "engines", "internals"): ("formulas", "schedula")}
# the standard library's underscored names that its documentation publishes
STANDARD_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make",
                                  "_field_defaults", "_getframe", "_exit", "_name_",
                                  "_value_", "_missing_", "_generate_next_value_"})


def _exported(library: str) -> frozenset[str]:
    module = importlib.import_module(library)
    return frozenset(getattr(module, "__all__", ()))


def public_module(dotted: str) -> bool:
    """Whether a module of one of LIBRARIES is public (see the docstring)."""
    parts = dotted.split(".")
    if parts[0] == "openpyxl":
        return not any(part.startswith("_") for part in parts)
    return len(parts) == 1


def public_name(library: str, module: str, name: str) -> bool:
    """Whether `name`, read from the library module `module`, is public."""
    if name.startswith("__") and name.endswith("__"):
        return True
    if name.startswith("_"):
        return False
    if library == "openpyxl":
        return True
    return module == library and name in _exported(library)


def project_files(root: Path) -> list[Path]:
    return sorted(p for package in PACKAGES for p in (root / package).rglob("*.py"))


def door_of(root: Path, path: Path) -> tuple[str, ...] | None:
    """The door `path` is part of, or None."""
    parts = path.relative_to(root).parts
    return next((door for door in DOORS if parts[:len(door)] == door), None)


def defined_underscored(trees: list[ast.AST]) -> set[str]:
    """Every underscored name the project's modules define: functions, classes, class and
    module variables, attributes assigned on any object, __slots__ and keyword names."""
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
                if not isinstance(node, ast.ClassDef):
                    names.update(a.arg for a in node.args.args + node.args.kwonlyargs)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name.split(".")[-1])
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets):
                names.update(e.value for e in ast.walk(node.value)
                             if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


@functools.cache
def library_underscored(library: str) -> frozenset[str]:
    """Every underscored attribute or function name a library's own source defines."""
    folder = Path(importlib.util.find_spec(library).origin).parent
    names = set()
    for path in folder.rglob("*.py"):
        with warnings.catch_warnings():  # the libraries' own invalid escapes in strings
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(path.read_bytes())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return frozenset(n for n in names if _underscored(n))


def _dotted(node: ast.AST) -> list[str] | None:
    """`a.b.c` as ["a", "b", "c"]; None for anything not a plain chain of names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def violations_in(path: Path, tree: ast.AST, own: set[str]) -> list[str]:
    """Each use of a non-public part of LIBRARIES in one module, as "file:line: what"."""
    found: dict[int, str] = {}  # one entry a line: its first finding
    # a local name -> the library module it stands for (`import schedula as sh`,
    # `from openpyxl import utils`, `import formulas.cell`)
    modules: dict[str, str] = {}
    imported: list[ast.Attribute] = []  # underscored names the project defines too

    def flag(node: ast.AST, what: str) -> None:
        found.setdefault(node.lineno, f"{path}:{node.lineno}: {what}")

    def check_module(node: ast.AST, dotted: str) -> None:
        if dotted.split(".")[0] in LIBRARIES and not public_module(dotted):
            flag(node, f"imports {dotted}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check_module(node, alias.name)
                if alias.name.split(".")[0] in LIBRARIES:
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    else:
                        modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            library = node.module.split(".")[0]
            if library not in LIBRARIES:
                continue
            if not public_module(node.module):
                check_module(node, node.module)
                continue
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if importlib.util.find_spec(node.module) and _is_module(submodule):
                    check_module(node, submodule)
                    modules[alias.asname or alias.name] = submodule
                elif not public_name(library, node.module, alias.name):
                    flag(node, f"imports {alias.name} from {node.module}")
        elif isinstance(node, ast.Call):
            callee = _dotted(node.func)
            strings = [a.value for a in node.args
                       if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if callee and callee[-1] in ("import_module", "__import__") and strings:
                check_module(node, strings[0])
            elif callee in (["getattr"], ["setattr"], ["hasattr"], ["delattr"]) and \
                    len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and \
                    isinstance(node.args[1].value, str):
                name = node.args[1].value
                if _underscored(name) and name not in own | STANDARD_UNDERSCORED:
                    flag(node, f"{callee[0]}(…, {name!r})")
        elif isinstance(node, ast.Attribute) and _underscored(node.attr):
            if node.attr not in own | STANDARD_UNDERSCORED:
                flag(node, f"reads or writes .{node.attr}, which the project does not define")
            elif not isinstance(node.value, ast.Name) or node.value.id not in ("self", "cls"):
                imported.append(node)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and \
                isinstance(node.value, ast.Call) and _dotted(node.value.func) == ["vars"]:
            name = node.slice.value
            if isinstance(name, str) and _underscored(name) and name not in own:
                flag(node, f"vars(…)[{name!r}]")
    libraries = {alias.name.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.Import) for alias in node.names} | \
        {node.module.split(".")[0] for node in ast.walk(tree)
         if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    libraries &= set(LIBRARIES)
    for node in imported:
        if any(node.attr in library_underscored(library) for library in libraries):
            flag(node, f"reads or writes .{node.attr}, an internal of {sorted(libraries)}")
    for node in ast.walk(tree):  # attributes of library modules, however they were named
        if isinstance(node, ast.Attribute) and not isinstance(
                getattr(node, "_parent_attribute", None), ast.Attribute):
            chain = _dotted(node)
            if not chain or chain[0] not in modules:
                continue
            module = modules[chain[0]]
            library = module.split(".")[0]
            for name in chain[1:]:
                if _is_module(f"{module}.{name}"):
                    module = f"{module}.{name}"
                    if not public_module(module):
                        flag(node, f"uses {module}")
                        break
                    continue
                if not public_name(library, module, name):
                    flag(node, f"uses {module}.{name}")
                break
    return [found[line] for line in sorted(found)]


def _underscored(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(dotted: str) -> bool:
    if dotted in sys.modules:
        return True
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def _mark_parents(tree: ast.AST) -> None:
    """Each Attribute node knows whether it is the inner part of a longer chain (only the
    whole chain `a.b.c` is read, not `a.b` again)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            node.value._parent_attribute = node


def violations(root: Path = ROOT) -> list[str]:
    files = project_files(root)
    trees = {path: ast.parse(path.read_text(encoding="utf-8"), str(path)) for path in files}
    outside = {path: tree for path, tree in trees.items() if door_of(root, path) is None}
    own = defined_underscored(list(outside.values()))
    found = []
    for path, tree in outside.items():
        _mark_parents(tree)
        found += violations_in(path.relative_to(root), tree, own)
    return found


def test_only_the_doors_touch_library_internals():
    found = violations()
    print("\n".join(found))
    assert not found, f"{len(found)} uses of library internals outside the doors"


def test_the_rule_sees_each_kind_of_use(tmp_path):
    """Each rule fires on a module that breaks it, and not on public uses."""
    package = tmp_path / "workbook_builder"
    package.mkdir()
    (package / "bad.py").write_text(
        "import formulas.functions\n"
        "import schedula as sh\n"
        "import openpyxl\n"
        "from formulas.cell import Cell\n"
        "from openpyxl.worksheet import _reader\n"
        "from formulas import ExcelModel, Parser, get_functions\n"
        "import importlib\n"
        "importlib.import_module('formulas.excel')\n"
        "ws = openpyxl.Workbook().active\n"
        "cells = ws._cells\n"
        "getattr(ws, '_cells')\n"
        "sh.utils.sol.Solution\n"
        "openpyxl.cell._writer\n"
        "x = openpyxl.utils.get_column_letter(3)\n"
        "class Mine:\n"
        "    def __init__(self, ranges):\n"
        "        self._value = ranges._value\n", encoding="utf-8")
    found = violations(tmp_path)
    print("\n".join(found))
    assert [line.split(":")[1] for line in found] == \
        ["1", "4", "5", "8", "10", "11", "12", "13", "17"], found


def door_imports(door: tuple[str, ...]) -> set[str]:
    """The libraries of LIBRARIES a door imports."""
    found = set()
    where = ROOT.joinpath(*door)
    for path in [where] if where.is_file() else where.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return found & set(LIBRARIES)


def test_every_library_the_internals_touch_has_a_version_guard():
    from workbook_builder.xlsx import versions

    # a door imports the libraries it is the door of, and no other's: no other library's
    # internals can be reached through it
    assert {door: door_imports(door) for door in DOORS} == \
        {door: set(libraries) for door, libraries in DOORS.items()}
    assert sorted(library for libraries in DOORS.values() for library in libraries) == \
        sorted(LIBRARIES)
    assert set(versions.SUPPORTED) == set(LIBRARIES)
    for library, (low, high) in versions.SUPPORTED.items():
        installed = importlib.import_module(library).__version__
        assert versions.supported(library) == versions.within(installed, low, high)
        assert not versions.supported(library, high) and versions.supported(library, low)


@pytest.mark.parametrize("value,forced", [("1", True), ("yes", True), ("0", False),
                                          ("", False), (None, False)])
def test_the_environment_switch_turns_every_guard_off(monkeypatch, value, forced):
    from workbook_builder.engines.internals import of_formulas
    from workbook_builder.xlsx import of_openpyxl, versions

    if value is None:
        monkeypatch.delenv(versions.RELEASED_LIBRARIES_SWITCH, raising=False)
    else:
        monkeypatch.setenv(versions.RELEASED_LIBRARIES_SWITCH, value)
    within = {library: versions.within(importlib.import_module(library).__version__, *span)
              for library, span in versions.SUPPORTED.items()}
    assert {library: versions.supported(library) for library in LIBRARIES} == \
        {library: within[library] and not forced for library in LIBRARIES}
    assert of_openpyxl.openpyxl_shortcuts() == (within["openpyxl"] and not forced)
    assert of_formulas.formula_shortcuts() == \
        (within["formulas"] and within["schedula"] and not forced)
    assert of_openpyxl.openpyxl_shortcuts(True) and of_formulas.formula_shortcuts(True)


def test_constraints_pin_every_dependency_and_the_guarded_releases():
    """constraints.txt (what CI installs) names one release of every dependency in
    pyproject.toml, the test extra's included, and the guarded libraries' releases lie
    inside what their shortcuts were written for."""
    import tomllib

    from packaging.requirements import Requirement

    from workbook_builder.xlsx import versions

    def canonical(name: str) -> str:
        return name.lower().replace("_", "-").replace(".", "-")

    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, release = line.partition("==")
            assert release and canonical(name) not in pins, line
            pins[canonical(name)] = release
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for text in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        requirement = Requirement(text)
        name = canonical(requirement.name)
        assert name in pins, f"{name} has no release in constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (text, pins[name])
    for library, span in versions.SUPPORTED.items():
        assert versions.within(pins[library], *span), (library, pins[library], span)


def test_chart_rows_are_the_rows_a_chart_is_anchored_to():
    from openpyxl import Workbook
    from openpyxl.chart import LineChart
    from openpyxl.drawing.spreadsheet_drawing import AnchorMarker, TwoCellAnchor

    from workbook_builder.xlsx.of_openpyxl import chart_rows

    ws = Workbook().active
    corner_to_corner = LineChart()
    corner_to_corner.anchor = TwoCellAnchor(_from=AnchorMarker(col=1, row=2),
                                            to=AnchorMarker(col=5, row=9))
    ws.add_chart(corner_to_corner)
    ws.add_chart(LineChart(), "H2")  # one corner only: no rows of its own
    assert chart_rows(ws) == [(3, 10)]


def test_openpyxl_is_as_released_after_we_read_and_save(tmp_path):
    """The number reader, the float writer and the font serialiser we replace while we read
    or save are openpyxl's own again afterwards, for a user's own openpyxl calls."""
    from openpyxl import Workbook
    from openpyxl.cell import _writer
    from openpyxl.styles.fonts import Font
    from openpyxl.worksheet import _reader

    from workbook_builder.xlsx.of_openpyxl import load_workbook, save_workbook

    released = (_reader._cast_number, _writer.safe_string, Font.__dict__.get("to_tree"),
                Font.to_tree)
    wb = Workbook()
    wb.active["A1"] = 0.1 + 0.2
    save_workbook(wb, tmp_path / "ours.xlsx")
    assert load_workbook(tmp_path / "ours.xlsx").active["A1"].value == 0.1 + 0.2
    assert (_reader._cast_number, _writer.safe_string, Font.__dict__.get("to_tree"),
            Font.to_tree) == released
