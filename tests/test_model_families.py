"""FamilySpec's behaviour flags are Literal types, checked when a spec is made."""

from __future__ import annotations

import dataclasses

import pytest

from bertcli.config.families import FAMILIES, _flag_values


def test_every_shipped_spec_uses_only_declared_flag_values():
    flags = _flag_values()
    assert {"positions", "feed_forward", "norm", "pair_head", "task_head", "attention", "init"} <= set(flags)
    for spec in FAMILIES.values():
        for name, allowed in flags.items():
            assert getattr(spec, name) in allowed, (spec.name, name)


@pytest.mark.parametrize("flag,value", [("norm", "mid"), ("pair_head", "NSP"), ("positions", "absolute")])
def test_a_misspelt_flag_is_refused_when_the_spec_is_made(flag, value):
    base = next(iter(FAMILIES.values()))
    with pytest.raises(ValueError, match=rf"{flag}='{value}' is not one of"):
        dataclasses.replace(base, **{flag: value})
