"""The wheel holds the whole package: every module under bertcli/ and every shipped recipe, and
installed from it (not editable), `bertcli finetune` finds every task folder. The packages are
found by setup.py, not listed, so a new folder cannot be left out; this builds the wheel to prove it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bertcli.finetune.command import discover

REPO = Path(__file__).resolve().parents[1]
# Building needs no index: the build backend (setuptools, and wheel under setuptools < 70.1) comes
# with the test extra, and --no-build-isolation uses it as installed.
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


def _pip(*args: str) -> None:
    proc = subprocess.run([*PIP, *args], capture_output=True, text=True, env={**os.environ, "PIP_NO_INDEX": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the sources (a build writes build/ and *.egg-info next to them)."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("bertcli", "recipes"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(root / "dist"), str(src))
    (found,) = (root / "dist").glob("bertcli-*.whl")
    return found


def _shipped() -> set[str]:
    modules = {f"bertcli/{p.relative_to(REPO / 'bertcli').as_posix()}" for p in (REPO / "bertcli").rglob("*.py")
               if "__pycache__" not in p.parts}
    recipes = {f"bertcli/recipes/{p.name}" for p in (REPO / "recipes").glob("*.yaml")}
    return modules | recipes | {"bertcli/recipes/__init__.py"}


@pytest.mark.slow
def test_the_wheel_holds_every_module_and_every_recipe_and_nothing_else(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = _shipped()
    assert len([n for n in expected if n.startswith("bertcli/finetune/")]) > 20 and len(expected) > 150
    assert not expected - names, f"missing from the wheel: {sorted(expected - names)}"
    dist_info = {n for n in names if n.split("/")[0].endswith(".dist-info")}
    assert names - dist_info == expected, f"not in the repository: {sorted(names - dist_info - expected)}"
    entry_points = next(n for n in dist_info if n.endswith("/entry_points.txt"))
    assert "bertcli = bertcli.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.mark.slow
def test_installed_from_the_wheel_every_task_and_recipe_is_found(wheel, tmp_path):
    """A plain install (files copied, no editable finder): what `bertcli finetune` and --recipe NAME see."""
    target = tmp_path / "site"
    _pip("install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel))
    code = ("import json, bertcli\nfrom importlib import resources\nfrom bertcli.finetune.command import discover\n"
            "print(json.dumps({'file': bertcli.__file__, 'tasks': list(discover()),\n"
            "                  'recipes': sorted(p.name for p in resources.files('bertcli.recipes').iterdir()\n"
            "                                    if p.name.endswith('.yaml'))}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(target)})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert Path(seen["file"]).is_relative_to(target), seen["file"]      # the installed copy, not this checkout
    assert seen["tasks"] == list(discover())
    assert seen["recipes"] == sorted(p.name for p in (REPO / "recipes").glob("*.yaml"))
