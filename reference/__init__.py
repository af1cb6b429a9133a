"""NumPy references, one `*_ref` function per sheet kind.

Written from the equations alone: this package imports only NumPy, never the workbook
builder. Each `*_ref(inputs, params)` takes the input blocks by name and returns every step
block by the same name the workbook gives it.
"""
