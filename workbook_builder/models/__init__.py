"""Real models in: reading checkpoints (`files`), the name tables of model families
(`families`) and a checkpoint's layer as a kind's inputs (`loader`). Imports nothing beyond
NumPy and the standard library until a checkpoint is read (PyTorch for .pt/.bin, the
`tokenizers` package for --text)."""
