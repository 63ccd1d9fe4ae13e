"""The package list, found rather than written out: every package under bertcli/ (a folder with an
`__init__.py`), so that a new module or task folder is in every wheel without an edit here, plus
`bertcli.recipes`, the shipped recipes, which live at the top of the repository (pyproject.toml maps
it to recipes/ and ships its YAML files as package data). pyproject.toml holds everything else;
tests/test_packaging.py builds the wheel and checks that it holds every module and every recipe.

(pyproject.toml's `packages.find` alone would find bertcli.* but not the recipes, which are not
under bertcli/: a wheel without them was built once.)
"""

from setuptools import find_packages, setup

setup(packages=[*find_packages(include=["bertcli", "bertcli.*"]), "bertcli.recipes"])
