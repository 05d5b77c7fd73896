"""The one packaging step pyproject.toml cannot express: a wheel carries the kernel sources, the
Alembic migrations, the site's templates and assets and the shipped stack pins as regress/_share/,
so an installed regress builds, migrates and renders from any directory (regress/facts/resources.py finds
them). An editable install reads the checkout itself and copies nothing."""

import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# The list of what travels lives in regress/facts/resources.py, next to the code that reads it.
_RES = runpy.run_path(str(ROOT / "regress" / "facts" / "resources.py"))
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.o", "*.co", "*.hsaco", "*.tmp")


class BuildPyWithShare(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        share = Path(self.build_lib) / "regress" / "_share"
        shutil.rmtree(share, ignore_errors=True)
        for tree in _RES["SHARED_TREES"]:
            shutil.copytree(ROOT / tree, share / tree, ignore=_SKIP)
        for name in _RES["SHARED_FILES"]:
            shutil.copy2(ROOT / name, share / name)


setup(cmdclass={"build_py": BuildPyWithShare})
