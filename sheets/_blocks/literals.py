"""Numbers written into formulas as literals."""


def excel_number(x: float) -> str:
    """A float as a formula literal that reads back as the same double, with a signed
    exponent (1E-12, not 1e-12 or 1E12: the `formulas` engine rejects an unsigned one)."""
    return repr(float(x)).upper()
