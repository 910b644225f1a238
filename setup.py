"""The wheel's one build step: sql/ and migrations/ stay at the top of the repository
(the product's shape) and are copied into the package as scrinalia_workers/sqldata/,
which scrinalia_workers.sqlfiles reads through importlib.resources. Everything else
is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithSQL(build_py):
    def run(self):
        super().run()
        if self.editable_mode:  # an editable install reads the checkout itself
            return
        for name in ("sql", "migrations"):
            target = Path(self.build_lib, "scrinalia_workers", "sqldata", name)
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for f in sorted((HERE / name).glob("*.sql")):
                shutil.copyfile(f, target / f.name)


setup(cmdclass={"build_py": BuildWithSQL})
