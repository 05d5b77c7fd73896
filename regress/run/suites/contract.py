"""The versioned numerics contract: loaded by regress.facts.metrics (its one loader), named here for
the suites."""

from regress.facts.metrics import SUPPORTED_CONTRACT_VERSIONS as SUPPORTED_VERSIONS
from regress.facts.metrics import Contract, load_contract, parse_contract

__all__ = ["SUPPORTED_VERSIONS", "Contract", "load_contract", "parse_contract"]
