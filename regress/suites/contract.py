"""The versioned numerics contract: loaded by regress.metrics (its one loader), named here for the suites."""

from regress.metrics import SUPPORTED_CONTRACT_VERSIONS as SUPPORTED_VERSIONS
from regress.metrics import Contract, load_contract, parse_contract

__all__ = ["SUPPORTED_VERSIONS", "Contract", "load_contract", "parse_contract"]
