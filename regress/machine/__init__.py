"""The live machine and its pin: stack keys probed, device state, pinned stacks (README.md)."""
