"""Packaging beyond setup.cfg: the npumon(1) man page, generated from the argument parser at build time and
installed as share/man/man1/npumon.1 (`man npumon`). Everything else is declared in setup.cfg."""

import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
MAN_PAGE = os.path.join("build", "man", "npumon.1")  # relative: data_files paths are relative to setup.py


def write_man_page(path: str) -> None:
    sys.path.insert(0, HERE)  # the npumon being built, not one installed elsewhere
    try:
        from npumon.cli.main import build_parser
        from npumon.cli.manpage import man_page
    finally:
        sys.path.remove(HERE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(man_page(build_parser()))


class BuildWithManPage(build_py):
    """build_py, then the man page: install_data (which copies it) runs after the build."""

    def run(self) -> None:
        super().run()
        write_man_page(os.path.join(HERE, MAN_PAGE))


setup(cmdclass={"build_py": BuildWithManPage}, data_files=[("share/man/man1", [MAN_PAGE])])
