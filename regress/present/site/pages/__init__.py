"""One page writer per page kind; each queues its pages on the SiteWriter with a data key."""

from .case import case_pages
from .common import Pages
from .index import index
from .report import gate_pages, regression_pages
from .run import run_pages
from .stack import stack_pages

WRITERS = (index, case_pages, run_pages, stack_pages, regression_pages, gate_pages)

__all__ = ["WRITERS", "Pages"]
