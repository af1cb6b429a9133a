"""The test suite's helpers, one module by job, imported as `helpers.<module>` (tests/ is on
the path of every test module): `books` (workbooks built for a test), `cli` (the command
line), `sheets` (reading a built file), `models` (tiny checkpoints of every model family),
`numpy_models` (the same written with NumPy alone), `requires` (skipping without a tool),
`runs` (made once per run), `doc_blocks`, `excel_files`, `page_fill`."""
