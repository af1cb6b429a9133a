"""The shape of the code: packages in layers, each importing only the layers below it (and
no cycle among packages or modules), the command line on top of the machinery (nothing
below it imports argparse), sheets that import from `reference/` only the one `*_ref` they
are checked against. (Each library's internals behind one door:
tests/test_library_internals.py.)"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("workbook_builder", "sheets", "reference")

# The layers of the house, bottom first: a package imports only packages of the layers
# below its own (packages side by side in one layer import neither the other). A package is
# one folder of workbook_builder/ or one module at its top, or `sheets`, or `reference`.
# docs/architecture.md lists the same layers, top first (a test holds the two together).
LAYERS = (
    ("reference",),                    # the NumPy references, nothing of the builder
    ("workbook_builder",),             # the version
    ("workbook_builder.errors",),      # a user's error
    ("workbook_builder.xlsx",),        # the workbook file: openpyxl's door, the releases
    ("workbook_builder.sheet",),       # declaring, placing and writing one sheet
    ("sheets",),                       # the kinds
    ("workbook_builder.registry",),    # finding the kinds
    ("workbook_builder.language", "workbook_builder.engines"),  # languages; evaluating
    ("workbook_builder.book",),        # whole workbooks, in memory and on disk
    ("workbook_builder.checking",),    # a workbook against its reference
    ("workbook_builder.models",),      # real models in, and the presets they give
    ("workbook_builder.teaching", "workbook_builder.demo"),  # class, grading; the demo
    ("workbook_builder.api",),         # the one door for scripts and the command line
    ("workbook_builder.cli", "workbook_builder.docs"),  # the command line; the kinds' pages
    ("workbook_builder.__main__",),    # python -m workbook_builder
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imports_of(path: Path, modules: dict[str, Path]) -> list[tuple[str, list[str], bool]]:
    """(imported project module, names, at module level?) for every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(node) for node in tree.body}
    # `if TYPE_CHECKING:` at module level declares what the module imports on first use
    top_level |= {id(inner) for node in tree.body if isinstance(node, ast.If)
                  and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
                  for inner in node.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [alias.name for alias in node.names]
            # `from package import module` imports the module
            targets = [(f"{node.module}.{n}", []) if f"{node.module}.{n}" in modules
                       else (node.module, [n]) for n in names]
        else:
            continue
        for target, names in targets:
            if target.split(".")[0] in PACKAGES:
                found.append((target, names, id(node) in top_level))
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        # a module's own packages are initialised before it runs: no edge back to them
        ancestors = {".".join(name.split(".")[:k]) for k in range(1, name.count(".") + 1)}
        for target, _, _ in imports_of(path, modules):
            # importing a.b.c runs a and a.b first
            parts = target.split(".")
            edges |= ({".".join(parts[:k]) for k in range(1, len(parts) + 1)} & set(modules)) \
                - ancestors
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def package_of(module: str) -> str:
    """The package a module belongs to, as LAYERS names them."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "workbook_builder" else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the module imports that make the edge ("a -> b")."""
    packages: dict[str, dict[str, set[str]]] = {}
    for module, imported in graph.items():
        edges = packages.setdefault(package_of(module), {})
        for target in imported:
            if package_of(target) != package_of(module):
                edges.setdefault(package_of(target), set()).add(f"{module} -> {target}")
    return packages


def layer_breaches(packages: dict[str, dict[str, set[str]]],
                   layers=LAYERS) -> list[str]:
    """Each package outside the layers, and each import of a package from its own layer
    or one above it, with the module imports that make it."""
    level = {package: n for n, layer in enumerate(layers) for package in layer}
    breaches = [f"{package} is in no layer" for package in sorted(packages)
                if package not in level]
    for package, edges in sorted(packages.items()):
        for target, why in sorted(edges.items()):
            if package in level and target in level and level[target] >= level[package]:
                breaches.append(f"{package} imports {target}, not below it: "
                                f"{', '.join(sorted(why))}")
    return breaches


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_the_projects_modules():
    graph = import_graph()
    assert len(graph) > 30
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_import_cycle_among_the_packages():
    packages = package_graph(import_graph())
    cycle = find_cycle({package: set(edges) for package, edges in packages.items()})
    assert cycle is None, " -> ".join(cycle)


def test_every_package_imports_only_the_layers_below_it():
    packages = package_graph(import_graph())
    assert {"workbook_builder.sheet", "sheets", "workbook_builder.api"} <= set(packages)
    breaches = layer_breaches(packages)
    assert not breaches, "\n".join(breaches)


def test_the_layer_rule_sees_an_import_upward_a_sideways_one_and_a_package_left_out():
    modules = {"low.a": {"high.b"}, "high.b": {"low.a"}, "side.c": {"high.b"},
               "new.d": set()}
    layers = (("low",), ("high", "side"))
    assert layer_breaches(package_graph(modules), layers) == [
        "new is in no layer",
        "low imports high, not below it: low.a -> high.b",
        "side imports high, not below it: side.c -> high.b"]


def architecture_map() -> str:
    return (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_the_map_lists_the_layers_the_imports_keep():
    """docs/architecture.md's list of layers, top first, names the packages of LAYERS."""
    section = architecture_map().split("### The layers, top to bottom", 1)[1].split("\n#", 1)[0]
    listed = [tuple(name if name in ("sheets", "reference", "workbook_builder")
                    else f"workbook_builder.{name}"
                    for name in re.findall(r"`([\w.]+?)/?`", line.split(" — ")[0]))
              for line in section.splitlines() if line.startswith("- ")]
    assert listed == [tuple(layer) for layer in reversed(LAYERS)]


def test_the_map_names_every_module_of_the_machinery():
    """Every module of workbook_builder/ is named in docs/architecture.md's layout of the
    code, as `module.py` in its package's entry (a top-level module as `module.py`)."""
    layout = architecture_map().split("## Layout of the code", 1)[1].split("\n## ", 1)[0]
    entries = re.split(r"\n  - (?=`)", layout)  # one entry per package of workbook_builder/
    unnamed = []
    for path in sorted((ROOT / "workbook_builder").rglob("*.py")):
        parts = path.relative_to(ROOT / "workbook_builder").parts
        if parts[-1] == "__init__.py":
            continue
        if len(parts) == 1:
            named = f"`{parts[0]}`" in layout
        else:
            entry = next((e for e in entries if e.startswith(f"`{parts[0]}/`")), "")
            named = f"`{parts[-1]}`" in entry or f"`{'/'.join(parts[1:])}`" in entry
        if not named:
            unnamed.append("/".join(parts))
    assert not unnamed, f"modules docs/architecture.md does not name: {unnamed}"


# what declaring a kind must never bring: the writer, the engines, whole books
RENDERERS = ("workbook_builder.sheet.layout", "workbook_builder.sheet.hand_layout",
             "workbook_builder.sheet.kind_sheet", "workbook_builder.sheet.charts",
             "workbook_builder.sheet.exercise", "workbook_builder.engines",
             "workbook_builder.book")


def test_declaring_a_kind_imports_no_writer():
    graph = import_graph()
    for kind in (m for m in graph if m.startswith("sheets.")):
        seen, todo = set(), [kind]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        assert not [m for m in seen if m.startswith(RENDERERS)], (kind, sorted(
            m for m in seen if m.startswith(RENDERERS)))


def test_the_machinery_knows_nothing_of_the_command_line():
    modules = project_modules()
    for name, path in modules.items():
        if name.startswith("workbook_builder.cli") or name == "workbook_builder.__main__":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                    for alias in node.names}
        imported |= {node.module for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert "argparse" not in imported, name
        assert not any(m.startswith("workbook_builder.cli") for m in imported), name
        if name.startswith("workbook_builder"):
            assert "print(" not in path.read_text(encoding="utf-8"), f"{name} prints"


def test_no_project_import_hides_inside_a_function():
    """A module may import a project module on first use (inside a function, to start
    fast) only if it declares it at module level too (under `if TYPE_CHECKING:`), so the
    import graph above, and its cycle check, has every edge."""
    modules = project_modules()
    hidden = []
    for name, path in modules.items():
        found = imports_of(path, modules)
        declared = {target for target, _, top in found if top}
        hidden += [(name, target) for target, _, top in found
                   if not top and target not in declared]
    assert not hidden, hidden


def test_an_import_on_first_use_is_found_hidden_unless_declared(tmp_path):
    lazy = "def f():\n    from workbook_builder.demo import run_demo\n"
    declared = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n" \
               "    from workbook_builder.demo import run_demo\n" + lazy
    modules = {"workbook_builder.demo": tmp_path / "demo.py"}
    for text, top in ((lazy, [False]), (declared, [True, False])):
        (tmp_path / "m.py").write_text(text)
        assert [t for _, _, t in imports_of(tmp_path / "m.py", modules)] == top


def test_sheets_import_from_reference_only_their_own_ref():
    modules = project_modules()
    for name, path in modules.items():
        if not name.startswith("sheets."):
            continue
        for target, names, _ in imports_of(path, modules):
            if target.startswith("reference"):
                own = f"reference.{name.split('.')[1]}"
                assert target == own and len(names) == 1 and names[0].endswith("_ref"), \
                    f"{name} imports {names} from {target}"


def test_reference_imports_nothing_of_the_builder():
    modules = project_modules()
    for name, path in modules.items():
        if name.startswith("reference"):
            assert all(t.startswith("reference") for t, _, _ in imports_of(path, modules)), name


def test_the_command_line_reaches_the_machinery_only_through_the_api():
    """…and the API's error (`api.AttnsheetsError`), from the module that defines it and
    imports nothing, so that a command line that imports no machinery (--help) still
    tells a user's error from a bug."""
    modules = project_modules()
    for name, path in modules.items():
        if name.startswith("workbook_builder.cli"):
            for target, _, _ in imports_of(path, modules):
                assert target.startswith(("workbook_builder.cli", "workbook_builder.api")) \
                    or target in ("workbook_builder", "workbook_builder.errors"), \
                    f"{name} imports {target}"


def kind_module_imports(modules: dict[str, Path]) -> list[tuple[str, str]]:
    """(importer, imported) for every import of a kind's module (sheets.<kind>) by another
    module of sheets/: a kind shares steps through the shared modules sheets/_*, never
    through another kind (the shared modules import no kind either)."""
    def kind(name: str) -> bool:
        return name.startswith("sheets.") and not name.split(".")[1].startswith("_")

    return sorted({(name, target) for name, path in modules.items()
                   if name.startswith("sheets.")
                   for target, _, _ in imports_of(path, modules)
                   if kind(target) and target.split(".")[:2] != name.split(".")[:2]})


def test_no_kind_imports_another_kinds_module():
    modules = project_modules()
    assert sum(name.startswith("sheets._blocks.") for name in modules) > 5
    assert kind_module_imports(modules) == []


def test_a_kind_importing_another_kind_is_found(tmp_path):
    files = {"sheets.gpt": "from sheets.decoder_block import X\n"
                           "from sheets._blocks.layers import Y\n",
             "sheets.decoder_block": "from sheets._blocks.layers import Y\n",
             "sheets._blocks.layers": "from workbook_builder.sheet import Step\n"}
    modules = {}
    for name, text in files.items():
        modules[name] = tmp_path / f"{name}.py"
        modules[name].write_text(text)
    assert kind_module_imports(modules) == [("sheets.gpt", "sheets.decoder_block")]


def test_tests_import_their_helpers_one_way_and_never_each_other():
    """Helpers come from tests/helpers/ as `helpers.<module>`: no test module imports
    another, nor conftest (pytest loads it), nor anything through `tests.`."""
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            found += [f"{path.relative_to(ROOT)} imports {name}" for name in names
                      if name.split(".")[0] in ("conftest", "tests")
                      or name.split(".")[0].startswith("test_")]
    assert not found, found
