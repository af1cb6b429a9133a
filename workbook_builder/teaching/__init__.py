"""The teacher's commands on top of books and checks: a class of students (`classroom`, its
record `record`), grading (`grade`), the tutorials' worked examples (`reproduce`) and the
translation catalogs held to every sheet (`catalog`). Sheet languages are
`workbook_builder/language/`; an exercise on a sheet, `workbook_builder/sheet/exercise.py`."""
