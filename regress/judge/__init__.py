"""From stored results to verdicts: evidence, the nightly analysis, the upgrade gate (README.md)."""
