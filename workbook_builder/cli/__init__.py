"""The command line: parsers, printing, progress and exit codes, on top of the machinery."""

from workbook_builder.cli.app import main

__all__ = ["main"]
