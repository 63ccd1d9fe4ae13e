"""The program's version, in the lowest layer: output markers, checkpoints' config.json and export
bundles record it, and `bertcli --version` prints it. `bertcli.__version__` is this string, and
pyproject.toml's `version` is the same."""

__version__ = "0.1.0"
