"""The README fits a screen and says how to run what it shows: its quick start is two
commands, and CI runs the second one verbatim; it says how to activate the environment its
other commands need; it links every page of docs/."""

import re
from pathlib import Path

from helpers.doc_blocks import RUN, SHOWN, blocks_of, doc_pages

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def quick_start_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```(?:bash|sh)?\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_quick_start_is_two_commands_and_ci_runs_the_test_one():
    commands = quick_start_commands()
    assert len(commands) == 2
    assert "attnsheets demo" in commands[0] and "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines()


def test_the_readme_fits_in_250_lines():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines"


def test_the_readme_activates_the_environment_before_its_first_bare_command():
    """After the quick start nothing but `.venv/bin/…` is on the PATH: the first block
    that calls `attnsheets`, `python` or `pip` by name must come after activation."""
    blocks = [b for b in blocks_of(README) if b.language == "bash"]
    activate = next((i for i, b in enumerate(blocks)
                     if "source .venv/bin/activate" in b.text.splitlines()), None)
    assert activate is not None, "the README never says `source .venv/bin/activate`"
    bare = re.compile(r"^(?:attnsheets|python|pip)\b", re.M)
    first_bare = next((i for i, b in enumerate(blocks) if bare.search(b.text)), len(blocks))
    assert activate < first_bare, blocks[first_bare].text


def test_every_block_says_whether_it_is_a_command():
    """A `bash` or `python` block is run as pasted (tests/test_doc_commands.py); anything
    else (output, a file's content, a diagram) names another language."""
    pages = doc_pages() + sorted((ROOT / "docs" / "kinds" / "prose").glob("*.md"))
    unnamed = [f"{b.page.relative_to(ROOT)}:{b.line} {b.language or '(none)'}"
               for page in pages for b in blocks_of(page) if b.language not in RUN + SHOWN]
    assert not unnamed, unnamed


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_github_anchor_follows_githubs_rule():
    assert github_anchor("Real models: checkpoints, text and BERT") == \
        "real-models-checkpoints-text-and-bert"
    assert github_anchor("The tutorial's worked example") == "the-tutorials-worked-example"


def test_every_relative_link_of_the_readme_and_docs_reaches_its_target():
    broken = []
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", file.read_text(encoding="utf-8"), re.M)
                if anchor not in {github_anchor(h) for h in headings}:
                    broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_links_every_page_of_docs():
    text = README.read_text(encoding="utf-8")
    linked = {(ROOT / t.partition("#")[0]).resolve()
              for t in re.findall(r"\]\((docs/[^)\s]+)\)", text)}
    pages = [p for p in (ROOT / "docs").glob("*.md")] + [ROOT / "docs" / "kinds" / "README.md"]
    assert not [p.name for p in pages if p.resolve() not in linked]
