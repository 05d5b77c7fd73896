"""What people read: the static site and the demo history (README.md)."""
