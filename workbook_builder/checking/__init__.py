"""Checking: re-derive every step from the inputs a workbook holds now, and compare."""
