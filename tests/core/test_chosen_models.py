"""--models takes registry ids separated by spaces or commas (as --formats takes formats)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from metamorph.errors import ConfigError
from metamorph.study import chosen_models

SPECS = [SimpleNamespace(id="base"), SimpleNamespace(id="cand"), SimpleNamespace(id="gemma3-270m")]


def test_comma_separated_ids_are_the_same_choice_as_separate_ones():
    assert [m.id for m in chosen_models(SPECS, ["gemma3-270m,base"])] == ["base", "gemma3-270m"]
    assert [m.id for m in chosen_models(SPECS, ["cand", "base, gemma3-270m"])] == ["base", "cand", "gemma3-270m"]


def test_an_unknown_id_in_a_comma_list_is_named_alone():
    with pytest.raises(ConfigError) as e:
        chosen_models(SPECS, ["base,nope"])
    assert str(e.value) == "unknown model id(s) ['nope']; the registry has ['base', 'cand', 'gemma3-270m']"


def test_a_list_option_given_twice_keeps_both_lists():
    """--models a --models b is both models (argparse's default keeps the last list only)."""
    import argparse

    from metamorph.study import add_study_commands

    parser = argparse.ArgumentParser()
    add_study_commands(parser)
    args = parser.parse_args(["format_robustness", "--models", "base", "--models", "cand,gemma3-270m"])
    assert args.models == ["base", "cand,gemma3-270m"]
    assert [m.id for m in chosen_models(SPECS, args.models)] == ["base", "cand", "gemma3-270m"]
    args = parser.parse_args(["wrapper_sensitivity", "--seeds", "0", "1", "--seeds", "7"])
    assert args.seeds == [0, 1, 7]
    assert parser.parse_args(["format_robustness"]).models is None
