"""Whole workbooks: build one for a kind, record what it is, save it atomically, read it back."""
