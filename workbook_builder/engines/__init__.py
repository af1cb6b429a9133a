"""Engines that calculate a workbook: the `formulas` package, LibreOffice, Gnumeric."""
