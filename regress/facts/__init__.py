"""The bottom layer: the facts every other folder imports, pure and torch-free (README.md)."""
