"""The README's quick start is two commands, and CI runs the second one verbatim."""

import re
from pathlib import Path

import pytest
from conftest import KINDS

from workbook_builder.sheet.kind import make_params

ROOT = Path(__file__).resolve().parent.parent


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_quick_start_is_two_commands_and_ci_runs_the_test_one():
    commands = quick_start_commands()
    assert len(commands) == 2
    assert "attnsheets demo" in commands[0] and "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines()


def readme_section(kind_name: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"^### `{re.escape(kind_name)}`.*?(?=^## |^### )", text, re.S | re.M)
    assert match, f"the README has no section for kind {kind_name}"
    return match.group(0)


def documented_name(name: str) -> str:
    """SCORES_H2 is documented as SCORES_Hh, S_B3 as S_Bj, SCORES_D64 (a width) as
    SCORES_Dw, Q_T3 (a decoding step) as Q_Tt, a stacked block's SCORES_H2_L1 as
    SCORES_Hh_Ll."""
    layer = re.search(r"_L\d+$", name)
    if layer:
        return documented_name(name[:layer.start()]) + "_Ll"
    for numbered, documented in (("H", "Hh"), ("B", "Bj"), ("D", "Dw"), ("T", "Tt")):
        name = re.sub(rf"_{numbered}\d+$", f"_{documented}", name)
    return name


@pytest.mark.parametrize("kind_name", sorted(KINDS))
def test_the_readme_names_every_block_the_declaration_has(kind_name):
    """The README's name tables are tested against the declarations: every input and every
    step of every test case is named in the kind's section."""
    kind = KINDS[kind_name]
    section = readme_section(kind_name)
    named = set(re.findall(r"`([A-Z][A-Za-z0-9_]*)`", section))
    for case in kind.test_cases + [values for _, values in kind.demo_cases]:
        params = make_params(kind, case)
        names = list(kind.input_shapes(params)) + kind.step_names(params)
        missing = sorted({documented_name(n) for n in names} - named)
        assert not missing, f"README section of {kind_name} lacks {missing}"
