"""Sheet kinds: one module per kind, each defining a `workbook_builder.sheet.kind.Kind` subclass.

Modules whose names start with an underscore hold shared step helpers, not kinds.
"""
