"""core.jobtext: each check refuses what its reader cannot take, and each quoting round-trips."""

from __future__ import annotations

import shlex

import pytest
from emit_support import sbatch_words

from mfukit.core import jobtext
from mfukit.errors import InputError


@pytest.mark.parametrize("value", ["plain", "with space", 'q"uote', "back\\slash", "#hash", "it's", "ünï"])
def test_sbatch_directive_is_read_back_as_one_argument(value: str) -> None:
    line = jobtext.sbatch_directive("comment", value, field="x")
    assert sbatch_words(line) == [f"--comment={value}"]


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "a\u2028b", "a\u202eb", "HetJob", "packjob"])
def test_sbatch_directive_refuses_what_a_line_cannot_hold(value: str) -> None:
    with pytest.raises(InputError):
        jobtext.sbatch_directive("comment", value, field="x")


@pytest.mark.parametrize("value", ["$(id)", "`id`", "a b", "'", "*", "~", ""])
def test_shell_word_round_trips(value: str) -> None:
    assert shlex.split(jobtext.shell_word(value, field="x")) == [value]


def test_slurm_filename_doubles_percent_and_refuses_backslash() -> None:
    assert jobtext.slurm_filename("/runs/50%/x", field="--out") == "/runs/50%%/x"
    with pytest.raises(InputError):
        jobtext.slurm_filename("/runs/a\\b", field="--out")


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "/abs"])
def test_path_component_refuses_anything_but_one_name(value: str) -> None:
    with pytest.raises(InputError):
        jobtext.path_component(value, field="scenario name")


def test_oci_reference_is_checked_in_linear_time() -> None:
    hostile = "a" + "-" * 100_000 + "!"
    with pytest.raises(InputError):
        jobtext.oci_reference(hostile, field="--image")
    with pytest.raises(InputError):
        jobtext.oci_reference("a/" + "b." * 50_000 + "!", field="--image")
