"""The one door to the internals of `formulas` and `schedula` (openpyxl's is
`workbook_builder/xlsx/of_openpyxl.py`).

Only the modules of this package use a name those two libraries do not publish (an
underscored name, a module outside their documented interface);
tests/test_library_internals.py reads every other module of the project to hold it so, and
says what counts as public. Every shortcut here is guarded by the library's release
(`workbook_builder/xlsx/versions.py`): outside the releases it was written for, or with
ATTNSHEETS_RELEASED_LIBRARIES=1 in the environment, the library's public path is taken
instead, slower but as released.

- of_formulas: our changes to the engine (in place only while we calculate), compiling
  each formula form once;
- of_schedula: the engine's calculation as a plain loop over its dispatcher's functions;
- direct_calc, fast_functions: the calculation straight from the cells, and the engine's
  functions on plain numbers, both reproducing the engine's own results exactly.
"""


class CalculationRefused(Exception):
    """A shortcut cannot reproduce the engine's own calculation of this workbook: the caller
    takes the engine's path."""
