"""Self-test of tests/system/noise.py (no root needed): a majority must pass, every try printed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.system.noise import (
    NoisyMachineWarning,
    Try,
    majority_of_tries,
    majority_passed,
    on_a_noisy_machine,
)


def _scripted(outcomes: str) -> tuple[Callable[[Try], None], list[int]]:
    """A check that passes (P) or fails (F) in the given order and notes its try number."""
    ran: list[int] = []

    def check(tr: Try) -> None:
        ran.append(tr.index)
        tr.note(value=0.5 * tr.index)
        assert outcomes[tr.index - 1] == "P", f"try {tr.index} missed"

    return check, ran


@pytest.mark.parametrize(
    ("outcomes", "tries_run", "passed"),
    [
        ("PPF", 2, True),  # decided after two passes
        ("PFP", 3, True),  # the first two disagree: a third decides
        ("FPP", 3, True),
        ("FPF", 3, False),
        ("FFP", 2, False),  # a majority can no longer pass
        ("PFF", 3, False),  # never stops at the first pass
    ],
)
def test_runs_until_a_majority_of_three_is_decided(
    outcomes: str, tries_run: int, passed: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    check, ran = _scripted(outcomes)
    done = majority_of_tries(check, 3, "x")
    assert ran == list(range(1, tries_run + 1))
    assert majority_passed(done) is passed
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == tries_run  # every try printed, pass or fail, with its numbers
    for i, line in enumerate(lines, 1):
        assert line.startswith(f"[x] try {i}/3 ") and f"value={0.5 * i:.4g}" in line
        assert ("FAIL (try" in line) is (outcomes[i - 1] == "F")


def test_five_tries_need_three() -> None:
    check, ran = _scripted("PFPFP")
    assert majority_passed(majority_of_tries(check, 5))
    assert ran == [1, 2, 3, 4, 5]


def test_fails_listing_every_try() -> None:
    check, _ = _scripted("FPF")
    with pytest.raises(pytest.fail.Exception) as failed:
        on_a_noisy_machine(check, what="claim")
    message = str(failed.value)
    assert "claim passed 1 of 3 tries (needs 2 of 3)" in message
    assert all(f"try {i}/3" in message for i in (1, 2, 3))
    assert "value=0.5" in message and "value=1.5" in message


def test_a_pass_that_needed_the_majority_rule_leaves_a_warning() -> None:
    check, _ = _scripted("PFP")
    with pytest.warns(NoisyMachineWarning, match="passed 2 of 3 tries"):
        on_a_noisy_machine(check, what="claim")


def test_an_error_that_is_not_an_assertion_is_raised_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ran: list[int] = []

    def check(tr: Try) -> None:
        ran.append(tr.index)
        raise KeyError("broken")

    with pytest.raises(KeyError):
        majority_of_tries(check, 3)
    assert ran == [1]
    assert "error: KeyError('broken')" in capsys.readouterr().out
