"""The sheets' look: what each colour means, the one sans-serif family on every cell
(sheet/printing.py says why this one), borders printed in place of gridlines, and the
height of a compact row."""

from openpyxl.styles import Border, Font, PatternFill, Side

from workbook_builder.sheet.printing import EXPLANATION_PT, FONT_NAME, FONT_PT

INPUT_FILL = PatternFill("solid", fgColor="FFF2CC")    # pale yellow: a value you may edit
FORMULA_FILL = PatternFill("solid", fgColor="DDEBF7")  # pale blue: a live formula
SKIP_FILL = PatternFill("solid", fgColor="D9D9D9")     # grey: a tile the algorithm skips
SKIP_FORMAT = '"skip";"skip";"skip"'                   # the cell still holds a number (0)
MASKED_FILL = PatternFill("solid", fgColor="D9D9D9", bgColor="D9D9D9")  # grey: masked out
MASKED_FORMAT = '"–";"–";"–"'                          # the cell still holds its 0
MASKED_FORMAT_ID = 300  # a custom format's id in the rule's style, apart from the cells'
NAME_FONT = Font(name=FONT_NAME, size=FONT_PT, bold=True, color="1F4E79")
EQUATION_FONT = Font(name=FONT_NAME, size=FONT_PT, italic=True, color="404040")
EXPLANATION_FONT = Font(name=FONT_NAME, size=EXPLANATION_PT, italic=True, color="595959")
LABEL_FONT = Font(name=FONT_NAME, size=FONT_PT, color="7F7F7F")
TEXT_FONT = Font(name=FONT_NAME, size=FONT_PT)
BOLD_FONT = Font(name=FONT_NAME, size=FONT_PT, bold=True)
TITLE_FONT = Font(name=FONT_NAME, size=14, bold=True)
THIN = Side(style="thin", color="BFBFBF")
CELL_BORDER = Border(left=THIN, right=THIN, top=THIN, bottom=THIN)  # printed in place of
NUMBER_FORMAT = "0.0000"                                             # gridlines
# a compact sheet's rows: as high as the 10 pt font needs
COMPACT_ROW_PT = 12.75
