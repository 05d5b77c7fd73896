"""Native code seen from Python without loading a kernel: the build path and the planners (README.md)."""
