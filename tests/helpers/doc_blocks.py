"""The fenced blocks of the README and docs/: which pages, which blocks, in which language."""

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# blocks of these languages are commands: tests/test_doc_commands.py runs them as pasted
RUN = ("bash", "python")
# blocks of these languages are shown, never run (output samples, files, diagrams)
SHOWN = ("text", "csv", "json")
_FENCE = re.compile(r"^( *)```(\S*)[^\n]*\n(.*?)^\1```[ \t]*$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    text: str
    section: str  # the `## ` section it sits in ("" before the first)


def doc_pages() -> list[Path]:
    """The README and every page under docs/; the per-kind notes in docs/kinds/prose are
    part of the generated pages, so they are read there."""
    pages = [ROOT / "README.md"]
    pages += sorted(p for p in (ROOT / "docs").rglob("*.md")
                    if "prose" not in p.relative_to(ROOT / "docs").parts)
    return pages


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()]
        sections = re.findall(r"^## (.*)$", before, re.M)
        indent = len(match.group(1))
        body = "\n".join(line[indent:] for line in match.group(3).splitlines())
        found.append(Block(page, before.count("\n") + 1, match.group(2), body + "\n",
                           sections[-1] if sections else ""))
    return found
