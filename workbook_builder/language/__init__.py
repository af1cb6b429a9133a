"""Sheet languages: a catalog per language (`locale/<lang>.po`, read by `po`), and the
translation of a built workbook's text (`i18n`). Below every book: a build translates its
sheets, `check` and `grade` read them in any language."""
