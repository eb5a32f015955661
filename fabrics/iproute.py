"""ip/tc/ethtool commands as data (argv tuples), executed without a shell and checked for errors.

`ip -batch` and `tc -batch` run many commands in one process per namespace (bring-up of a
128-host fabric would otherwise spawn thousands of processes); without -force they stop at the
first failing line, and we report the line and tc's/ip's message. Mininet's habit of printing
"*** Error" and carrying on (docs/architecture.md, "This kind of kernel") cannot happen here:
every non-zero exit raises.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass

from emulator.errors import EnvironmentProblem
from emulator.netns import entered

NETNS_DIR = "/run/netns"


class CommandFailed(EnvironmentProblem):
    """An ip/tc/ethtool command exited non-zero; the message names the command and its stderr."""


@dataclass(frozen=True)
class Cmd:
    """One command. `tool` is ip, tc, ethtool...; `netns` None means the caller's namespace."""

    tool: str
    args: tuple[str, ...]
    netns: str | None = None

    def argv(self) -> list[str]:
        if self.netns is None:
            return [self.tool, *self.args]
        if self.tool in ("ip", "tc"):
            return [self.tool, "-n", self.netns, *self.args]
        return ["ip", "netns", "exec", self.netns, self.tool, *self.args]

    def __str__(self) -> str:
        return " ".join(self.argv())


def ip(*args: str, netns: str | None = None) -> Cmd:
    return Cmd("ip", tuple(args), netns)


def tc(*args: str, netns: str | None = None) -> Cmd:
    return Cmd("tc", tuple(args), netns)


def run(cmd: Cmd, *, check: bool = True, timeout_s: float = 30.0) -> str:
    """Run one command; return stdout; raise CommandFailed with its stderr when it fails."""
    try:
        proc = subprocess.run(
            cmd.argv(), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise EnvironmentProblem(f"`{cmd.tool}` is not installed (run ./setup.sh)") from None
    except subprocess.TimeoutExpired:
        raise CommandFailed(f"`{cmd}` did not finish within {timeout_s:g} s") from None
    if check and proc.returncode != 0:
        raise CommandFailed(f"`{cmd}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _batch_line(cmd: Cmd) -> str:
    for arg in cmd.args:
        if not arg or any(c.isspace() for c in arg) or '"' in arg or "\\" in arg:
            raise ValueError(f"argument {arg!r} of `{cmd}` cannot go through -batch")
    return " ".join(cmd.args)


def run_batch(cmds: Sequence[Cmd], *, force: bool = False, timeout_s: float = 120.0) -> str:
    """Run commands of one tool (ip or tc) in one namespace as a single `-batch` process.

    With force=False the tool stops at the first failing line and this raises naming that line;
    with force=True it runs every line and the caller gets stderr back to judge (used when
    releasing resources that may already be gone)."""
    if not cmds:
        return ""
    tool, netns = cmds[0].tool, cmds[0].netns
    if any(c.tool != tool or c.netns != netns for c in cmds) or tool not in ("ip", "tc"):
        raise ValueError("run_batch takes ip or tc commands of one namespace")
    lines = [_batch_line(c) for c in cmds]
    argv = [tool, *(["-n", netns] if netns else []), *(["-force"] if force else []), "-batch", "-"]
    proc = subprocess.run(
        argv,
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0 and not force:
        # iproute2 reports "Command failed -:N" with the 1-based line number.
        detail = proc.stderr.strip().replace("\n", "; ")
        failed = _failed_line(proc.stderr, lines)
        where = f" at `{tool}{' -n ' + netns if netns else ''} {failed}`" if failed else ""
        raise CommandFailed(f"{tool} -batch failed{where}: {detail}")
    return proc.stderr


def _failed_line(stderr: str, lines: list[str]) -> str | None:
    marker = "Command failed -:"
    for part in stderr.splitlines():
        if marker in part:
            try:
                return lines[int(part.split(marker, 1)[1].split()[0]) - 1]
            except (ValueError, IndexError):
                return None
    return None


def run_grouped(cmds: Iterable[Cmd], *, parallel: int = 4) -> None:
    """Run ip/tc commands batched per (tool, namespace), namespaces concurrently, order kept
    within each namespace. Other tools run one process each, concurrently."""
    groups: dict[tuple[str, str | None], list[Cmd]] = {}
    singles: list[Cmd] = []
    for cmd in cmds:
        if cmd.tool in ("ip", "tc"):
            groups.setdefault((cmd.tool, cmd.netns), []).append(cmd)
        else:
            singles.append(cmd)
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = [pool.submit(run_batch, group) for group in groups.values()]
        futures += [pool.submit(run, cmd) for cmd in singles]
        errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error


def in_netns(name: str) -> AbstractContextManager[None]:
    """Run the body with this thread in network namespace `name` (sockets made inside stay there).

    One setns implementation serves the fabric and the engine: emulator.netns.entered.
    """
    return entered(name)


def existing_netns() -> set[str]:
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()
