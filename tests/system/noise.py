"""Timing claims on a shared machine: a retried check must pass a majority of its tries.

A check that is only noisy is first made robust (more data, a better statistic); a retry is the
last resort, and then the check must pass a majority of its tries (2 of 3), not any one of them:
a regression that fails half the time must not get through. Every try's numbers are printed,
pass or fail (`pytest -s` shows them; without -s pytest shows them with a failure, and a pass
that needed the majority rule leaves a warning in the summary), and a failure lists every try.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest


class NoisyMachineWarning(UserWarning):
    """A retried check passed a majority of its tries, but not all of them."""


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@dataclass
class Try:
    """One try of a check: it notes what it measured, before its assertions, so that the numbers
    of a failing try are printed too."""

    index: int
    tries: int
    numbers: dict[str, object] = field(default_factory=dict)
    failure: str | None = None  # the assertion that failed; None once the try passed

    def note(self, **numbers: object) -> None:
        self.numbers.update(numbers)

    @property
    def passed(self) -> bool:
        return self.failure is None

    def __str__(self) -> str:
        verdict = "pass" if self.passed else f"FAIL ({self.failure})"
        numbers = " ".join(f"{k}={_fmt(v)}" for k, v in self.numbers.items()) or "no numbers"
        return f"try {self.index}/{self.tries} {verdict}: {numbers}"


def majority_of_tries(check: Callable[[Try], None], tries: int = 3, what: str = "") -> list[Try]:
    """Run `check` until a majority of `tries` passed or can no longer pass (2 of 3: two passes,
    or two failures; a third try when the first two disagree), printing each try as it ends.

    A try fails on an AssertionError; any other exception is an error, not noise, and is raised
    at once. Each try must set up its own state. Returns the tries; `majority_passed` says
    whether they passed."""
    assert tries >= 1
    need = tries // 2 + 1
    done: list[Try] = []
    label = f"[{what}] " if what else ""
    while True:
        t = Try(len(done) + 1, tries)
        done.append(t)
        try:
            check(t)
        except AssertionError as exc:
            first = str(exc).splitlines()[0][:500] if str(exc) else repr(exc)
            t.failure = first
        except BaseException as exc:
            t.failure = f"error: {exc!r}"[:500]
            print(f"{label}{t}", flush=True)
            raise
        print(f"{label}{t}", flush=True)
        passed = sum(x.passed for x in done)
        if passed >= need or len(done) - passed > tries - need:
            return done


def majority_passed(done: list[Try]) -> bool:
    tries = done[0].tries
    return sum(t.passed for t in done) >= tries // 2 + 1


def describe(done: list[Try]) -> str:
    passed = sum(t.passed for t in done)
    return (
        f"passed {passed} of {len(done)} tries (needs {done[0].tries // 2 + 1} of {done[0].tries}): "
        + " | ".join(str(t) for t in done)
    )


def on_a_noisy_machine(check: Callable[[Try], None], tries: int = 3, what: str = "") -> list[Try]:
    """Pass if `check` passes a majority of `tries` tries; fail listing every try otherwise.

    For timing claims on a shared 2-core machine, where another tenant can starve a worker for
    tens of milliseconds, once the check has been made as robust as it can be: noise makes a
    try fail now and then, a real error makes most of them fail."""
    done = majority_of_tries(check, tries, what)
    if not majority_passed(done):
        pytest.fail(f"{what or 'check'} {describe(done)}")
    if not all(t.passed for t in done):
        warnings.warn(f"{what or 'check'} {describe(done)}", NoisyMachineWarning, stacklevel=2)
    return done
