"""Live shading, as conditional formats over a block: masked cells grey with a dash (a rule
reading the mask, so the cell keeps the 0 the next formulas add up), and a heat map of
weights from white (0) to red (1)."""

from openpyxl.formatting.rule import ColorScaleRule, Rule
from openpyxl.styles.differential import DifferentialStyle
from openpyxl.styles.numbers import NumberFormat
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.refs import cell_ref
from workbook_builder.sheet.styles import MASKED_FILL, MASKED_FORMAT, MASKED_FORMAT_ID


def shade_masked(ws: Worksheet, block: Block, mask: Block) -> None:
    """Grey with a dash wherever the mask's cell is 0."""
    masked = DifferentialStyle(fill=MASKED_FILL, numFmt=NumberFormat(
        numFmtId=MASKED_FORMAT_ID, formatCode=MASKED_FORMAT))
    ws.conditional_formatting.add(
        block.whole().replace("$", ""),
        Rule(type="expression", formula=[f"{cell_ref(mask.top, mask.left)}=0"],
             stopIfTrue=True, dxf=masked))


def heat_map(ws: Worksheet, block: Block) -> None:
    """White at 0 to red at 1."""
    ws.conditional_formatting.add(
        block.whole().replace("$", ""),
        ColorScaleRule(start_type="num", start_value=0, start_color="FFFFFF",
                       end_type="num", end_value=1, end_color="F8696B"))
