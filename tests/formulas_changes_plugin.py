"""A pytest plugin keeping our changes to the `formulas` engine in place for a whole run
(`of_formulas.formulas_changes`, entered before the first test module is imported):
tests/test_formulas_conformance.py runs the engine's own test suite with it."""

import contextlib

from workbook_builder.engines.internals import of_formulas

_whole_run = contextlib.ExitStack()


def pytest_configure(config):  # noqa: ARG001 (pytest's hook signature)
    _whole_run.enter_context(of_formulas.formulas_changes())


def pytest_unconfigure(config):  # noqa: ARG001
    _whole_run.close()
