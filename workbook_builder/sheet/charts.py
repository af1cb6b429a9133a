"""A chart in its placed slot: its title in the slot's first row and the chart below it,
every series a reference to the live cells of a block already on the sheet (`Series` of
sheet/declare.py), anchored to its cells corner to corner."""

from collections.abc import Callable, Mapping

from openpyxl.chart import BarChart, LineChart, ScatterChart
from openpyxl.chart import Series as ChartData
from openpyxl.chart.data_source import AxDataSource
from openpyxl.chart.layout import Layout, ManualLayout
from openpyxl.chart.series import SeriesLabel, StrRef
from openpyxl.drawing.spreadsheet_drawing import AnchorMarker, TwoCellAnchor
from openpyxl.drawing.text import CharacterProperties, ParagraphProperties
from openpyxl.worksheet.worksheet import Worksheet

from workbook_builder.sheet.block import Block
from workbook_builder.sheet.cells import write_text
from workbook_builder.sheet.declare import Series, text_of
from workbook_builder.sheet.places import Placed, drawn_series
from workbook_builder.sheet.refs import cell_ref, quote_sheet, range_ref
from workbook_builder.sheet.styles import NAME_FONT
from workbook_builder.xlsx.of_openpyxl import merge_row


def add_chart(ws: Worksheet, placed: Placed, blocks: Mapping[str, Block],
              name_cells: Mapping[str, tuple[int, int]], params,
              tr: Callable[[str], str]) -> None:
    """The chart of `placed`, its series read from `blocks` (a one-column block's series
    named by the block's name cell, in `name_cells`); axis and legend titles in the sheet's
    language (`tr`)."""
    chart, top, left = placed.item, placed.top, placed.left
    cols, rows = placed.cols, placed.rows - 1
    series = drawn_series(chart, blocks)
    write_text(ws, top, left, text_of(chart.title, params)).font = NAME_FONT
    if cols > 1:  # the title spans the chart (and the sheet's extent its slot)
        merge_row(ws, top, left, left + cols - 1)
    drawn = {"scatter": ScatterChart, "line": LineChart, "bar": BarChart}[chart.kind]()
    if chart.kind == "scatter":  # the schema requires a style: lines and markers
        drawn.scatterStyle = "lineMarker"
    drawn.x_axis.title = tr(chart.x_title) if chart.x_title else None
    drawn.y_axis.title = tr(chart.y_title) if chart.y_title else None
    if chart.legend_title:
        _legend_title(drawn, tr(chart.legend_title))
    drawn.x_axis.delete = drawn.y_axis.delete = False  # openpyxl 3.1 hides them otherwise
    drawn.x_axis.axPos = "b"
    if chart.log_x is not None:
        drawn.x_axis.scaling.logBase = chart.log_x
    if chart.y_range is not None:
        drawn.y_axis.scaling.min, drawn.y_axis.scaling.max = chart.y_range
    drawn.x_axis.tickLblPos = "low"  # under the plot, also when values go below 0
    drawn.y_axis.number_format = "General"  # not the cells' four decimals
    for one in series:
        drawn.series.append(_chart_data(one, chart.kind, blocks, name_cells))
    # anchored to its cells, corner to corner: whatever height its rows take (a
    # translated line, a compact row), the chart stays inside them, so a page break,
    # which falls only between units, never cuts it, and the print area holds it
    drawn.anchor = TwoCellAnchor(editAs="twoCell",
                                 _from=AnchorMarker(col=left - 1, row=top),
                                 to=AnchorMarker(col=left - 1 + cols, row=top + rows))
    ws.add_chart(drawn)


def _chart_data(series: Series, kind: str, blocks: Mapping[str, Block],
                name_cells: Mapping[str, tuple[int, int]]):
    """Values, x values (categories) and name of one series, as sheet references."""
    block = blocks[series.block]
    count = block.cols if series.along == "col" else block.rows
    if not 0 <= series.index < count:
        raise ValueError(f"chart series {series.index} is outside block {block.name}")
    sheet = quote_sheet(block.sheet)
    if series.along == "col":
        column = block.left + series.index
        values = range_ref(block.top, column, block.bottom, column, True, True)
        labels, name = block.row_labels(), cell_ref(block.top - 1, column, True, True)
        if block.cols == 1:  # "max", "α": the block's name says which it is
            name = cell_ref(*name_cells[block.name], True, True)
    else:
        row = block.top + series.index
        values = range_ref(row, block.left, row, block.right, True, True)
        labels, name = block.col_labels(), cell_ref(row, block.left - 1, True, True)
    data = ChartData(f"{sheet}!{values}",
                     xvalues=f"{sheet}!{labels}" if kind == "scatter" else None)
    data.smooth = False  # straight segments: a smoothed curve overshoots the points
    if kind == "scatter":
        data.marker.symbol = "circle"
    else:
        data.cat = AxDataSource(strRef=StrRef(f=f"{sheet}!{labels}"))
    data.tx = SeriesLabel(strRef=StrRef(f=f"{sheet}!{name}"))
    return data


def _sized(title, size: int) -> None:
    """A chart or axis title in bold of `size` hundredths of a point."""
    for paragraph in title.tx.rich.p:
        paragraph.pPr = ParagraphProperties(defRPr=CharacterProperties(sz=size, b=True))
        for piece in paragraph.r or []:
            piece.rPr = CharacterProperties(sz=size, b=True)


def _legend_title(drawn, text: str) -> None:
    """A title over the chart's legend (the file format has no legend title): the chart's
    own title, small, set at the top right above the legend, which sits on the right."""
    drawn.legend.position = "r"
    drawn.title = text
    drawn.title.overlay = True  # over the plot's top right corner, taking no height of it
    _sized(drawn.title, 1000)  # 10 pt: 8 pt or more at the smallest print scale
    drawn.title.layout = Layout(manualLayout=ManualLayout(x=0.78, y=0.02, xMode="edge",
                                                          yMode="edge"))
