"""pyproject.toml holds the metadata; this only records, in the installed
package, where the checkout's build tree is (selene/_build_tree.py), so that
`pip install ./python` after `make` finds build/libselene.so without an
install of the library (SELENE_LIBRARY and an installed prefix come first)."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithTree(build_py):
    def run(self):
        super().run()
        path = os.path.join(self.build_lib, "selene", "_build_tree.py")
        with open(path, "w") as f:
            f.write("BUILD_TREE = %r\n" % os.path.join(os.path.dirname(HERE), "build"))


setup(cmdclass={"build_py": BuildWithTree})
