"""The translation catalogs against what the sheets really write.

Builds every kind's demo, example and test cases and declared variants (each layout, and a
student's exercise) with a catalog that notes each text it is asked for, then reports

- missing: English a sheet writes with no catalog entry, other than what stays as written
  (`stays_as_written`: token labels, numbers, names and equations);
- unused: catalog entries no case needs (a kind's English changed, or a slot was renamed
  on one side: the entry no longer matches and the text went back to English).

    python -m workbook_builder.cli.catalog check [--lang zh] [--catalog FILE.po]

Exit 0: all is well; 1: text missing or entries unused; 2: the catalog cannot be read.
"""

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from workbook_builder.book.workbook import build_workbook
from workbook_builder.errors import UserError
from workbook_builder.language import i18n
from workbook_builder.models import examples as presets
from workbook_builder.registry import load_kinds
from workbook_builder.sheet.kind import complete_inputs, make_params
from workbook_builder.sheet.request import BuildRequest, ExerciseSpec

LAYOUTS = ("cells", "blocks", "hand")

# Text that stays as written in every language, each rule with an example:
# - a token label of the sheet ("我", "animal");
# - a number ("0.5", "1e-05");
# - names and equations: no English word outside `name=value` settings and `--flags`,
#   where a word is 3+ letters, not all capitals (WEIGHTS, CHECK_OUTPUT) and not a
#   function of the equations below ("m_i = max_j (S/√d_k)_ij", "silu(z) = z·σ(z)",
#   "seq_len=4, d_k=2; layout=cells", "d1.n1").
EQUATION_WORDS = frozenset("""exp max min sum sqrt tanh softmax rowmax rowsum softplus mask
cos sin concat head act lse out silu sigmoid pos elu relu gelu erf eps std attnsheets""".split())
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _without_settings(text: str) -> str:
    text = re.sub(r"[\w.]+=[^\s,;]*", " ", text)  # name=value settings
    return re.sub(r"--[\w-]+(?: [\w|]+)?", " ", text)  # command-line flags and values


def english_words(text: str) -> list[str]:
    """The English words of `text` that would need a translation (see EQUATION_WORDS)."""
    return [w for w in re.findall(r"[A-Za-z]{3,}", _without_settings(text))
            if not w.isupper() and w.lower() not in EQUATION_WORDS]


CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def stays_as_written(text: str) -> bool:
    """Text that needs no entry: empty, a number, names and equations, or (for a text
    joining a name and a translation, "Attention: 单头…") Chinese with no two English
    words in a row."""
    if not text.strip() or NUMBER.fullmatch(text.strip()):
        return True
    if CJK.search(text):
        return re.search(r"\b[a-z]{2,} [a-z]{2,}\b", _without_settings(text)) is None
    return not english_words(text)


@dataclass(frozen=True)
class Case:
    name: str  # kind/case/layout[/exercise]
    request: BuildRequest  # in English: `collect` builds it in the language it checks
    inputs: dict


def variants(kind) -> Iterator[tuple[str, dict]]:
    """The kind's defaults with one declared choice changed: each other value of a
    parameter that declares its `choices`, the other value of a true/false one."""
    for f in dataclasses.fields(kind.Params):
        if f.type in (bool, "bool"):
            values = [not f.default]
        else:
            values = [c for c in f.metadata.get("choices", ()) if c != f.default]
        for value in values:
            try:
                make_params(kind, {f.name: value})
            except UserError:  # needs other parameters changed too
                continue
            yield f"{f.name}={value}", {f.name: value}


def examples(kind) -> Iterator[tuple[str, object]]:
    """The kind's examples; one that reads a model also as on a machine without it (its
    stand-in, with its own note)."""
    from unittest import mock

    for name in kind.examples:
        yield name, presets.make_example(kind, name)
        if presets.reads_a_model(kind, name):
            with mock.patch.object(presets, "minilm_zip", return_value=None):
                yield f"{name}-without-model", presets.make_example(kind, name)


def cases() -> Iterator[Case]:
    """Every kind at its defaults, its examples, its demo cases and the test suite's
    cases, in every layout (the first of them also as a student's exercise of its last
    two steps), and each of its `variants` in the cells layout."""
    for kind_name, kind in sorted(load_kinds().items()):
        for stem, values in variants(kind):
            params = make_params(kind, values)
            yield Case(f"{kind_name}/{stem}/cells",
                       BuildRequest(kind, params, kind.labels(params, None)),
                       complete_inputs(kind, params, {}, 0))
        setups = [("defaults", {}, {}, None, None)]
        for example, preset in examples(kind):
            given = {k: np.asarray(v, dtype=float) for k, v in preset.inputs.items()}
            setups.append((f"example-{example}", preset.params, given, preset.tokens,
                           preset.note))
        setups += [(stem, values, {}, None, None) for stem, values in kind.demo_cases]
        setups += [(f"test-{i}", values, {}, None, None)
                   for i, values in enumerate(kind.test_cases, start=1)]
        for n, (stem, values, given, tokens, note) in enumerate(setups):
            params = make_params(kind, values)
            inputs = complete_inputs(kind, params, given, 0)
            labels = kind.labels(params, tokens)
            for layout in LAYOUTS:
                name = f"{kind_name}/{stem}/{layout}"
                request = BuildRequest(kind, params, labels, layout, note=note)
                yield Case(name, request, inputs)
                if n == 0:
                    steps = tuple(kind.step_names(params)[-2:])
                    yield Case(f"{name}/exercise", dataclasses.replace(
                        request, exercise=ExerciseSpec(steps), student="s01",
                        student_name="Ann"), inputs)


@dataclass
class Findings:
    lang: str
    cases: int = 0
    texts: int = 0
    missing: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # text -> cases
    used: set[tuple[str, str]] = field(default_factory=set)  # (section, English)
    unused: list[tuple[str, str]] = field(default_factory=list)


def collect(lang: str = "zh", sections=None, only: Iterator[Case] | None = None) -> Findings:
    """Build every case in `lang` with the catalog's `sections` (the shipped one by
    default) and compare what the sheets wrote with the catalog."""
    sections = i18n.catalog_sections(lang) if sections is None else sections
    found = Findings(lang)
    for case in cases() if only is None else only:
        with i18n.trial(sections) as record:
            build_workbook(dataclasses.replace(case.request, lang=lang), case.inputs)
        found.cases += 1
        found.texts += len(record)
        order = i18n.kind_sections(case.request.kind.name)
        for text, key in record.items():
            if key is None:
                if not stays_as_written(text):
                    found.missing[text].add(case.name)
            elif key:
                section = next(s for s in reversed(order) if key in sections.get(s, {}))
                found.used.add((section, key))
    found.unused = [(s, k) for s, entries in sections.items() for k in entries
                    if (s, k) not in found.used]
    return found


def check_catalog(lang: str = "zh", catalog_file: Path | None = None) -> Findings:
    """`collect` with the shipped catalog of `lang`, or with the .po file `catalog_file`
    (a translator's copy); a file that cannot be read is a UserError naming it."""
    if catalog_file is None:
        return collect(lang)
    try:
        sections = i18n.parse_catalog(Path(catalog_file).read_text(encoding="utf-8"),
                                      str(catalog_file))
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{catalog_file}: cannot read it ({e})") from None
    except i18n.PoError as e:
        raise UserError(str(e)) from None
    return collect(lang, sections)
