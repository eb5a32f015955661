"""The project's own error types and the exit codes the CLI maps them to.

Every error raised for bad input names what was wrong (file, key path and line, node id) so the
CLI can print it as one line. Code that catches a library's exception for input it was handed
re-raises it as one of these, never lets it escape as a traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_EXPECTATION_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


class EmulatorError(Exception):
    """Base of every error the CLI reports as one line."""

    exit_code = EXIT_BAD_INPUT


class InputError(EmulatorError):
    """A file, scenario or argument the user handed in is unusable."""


class TraceError(InputError):
    """A Chakra trace (or its comm-group file) cannot be read or is inconsistent."""


class ScenarioError(InputError):
    """A scenario YAML is invalid: unknown key, wrong type, value out of range."""


class PlanError(InputError):
    """A trace cannot be turned into flows (unmatched collectives, sends without receives)."""


class NotImplementedYet(EmulatorError):
    """A command that exists in the CLI but whose capability has not landed yet."""


class EnvironmentProblem(EmulatorError):
    """The machine lacks something a command needs (root, a kernel feature, a tool)."""
