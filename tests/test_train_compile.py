"""train.compile: true | false | auto, and what auto chooses (CUDA only: on a CPU compiling takes
minutes for a modest gain, docs/benchmarks.md). The compiled blocks' numerics are measured in
docs/benchmarks.md (compiling on two loaded cores takes minutes, too long for the suite)."""

from __future__ import annotations

import pytest
import torch

from bertcli.config.recipe import load_recipe
from bertcli.core.errors import UserError
from bertcli.train.compile import compile_layers


@pytest.mark.parametrize("value,cpu,cuda", [("auto", False, True), ("true", True, True), ("false", False, False)])
def test_the_setting_and_what_auto_chooses(value, cpu, cuda):
    setting = load_recipe("bert-tiny", [f"train.compile={value}"]).train.compile
    assert compile_layers(setting, torch.device("cpu")) is cpu
    assert compile_layers(setting, torch.device("cuda")) is cuda


def test_the_default_does_not_compile_and_other_values_are_refused():
    assert load_recipe("bert-tiny").train.compile is False
    with pytest.raises(UserError, match="train.compile"):
        load_recipe("bert-tiny", ["train.compile=maybe"])
