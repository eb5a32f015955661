"""Every namespace, link, qdisc, address, BPF program and process the tool creates, recorded before it
is made (a process as soon as it has a pid: a Mininet node's shell, fabrics/mininet_builder.py),
and the temporary folders the process holds while a fabric is up (a run's generated trace set:
`owned_folder`), which only a killed run leaves behind.

The state file (/run/chakra-emulator/state.json, mode 0600, on tmpfs so it goes away with the
namespaces at reboot) is claimed atomically at bring-up: while it exists, another bring-up
refuses. Resources are appended to it before the commands that create them run, and released in
reverse order on success, on error and on Ctrl-C. `emulate clean` reads only this file (never
names or patterns) to release what a killed run left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emulator.errors import EnvironmentProblem
from fabrics import underlay_guard
from fabrics.iproute import Cmd, existing_netns, ip, run, run_batch, tc

STATE_DIR_ENV = "CHAKRA_EMULATOR_STATE_DIR"
DEFAULT_STATE_DIR = "/run/chakra-emulator"

Resource = dict[str, Any]


def state_path() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV, DEFAULT_STATE_DIR)) / "state.json"


_FOLDERS: list[str] = []  # the temporary folders this process holds now (owned_folder)


@contextlib.contextmanager
def owned_folder(prefix: str) -> Iterator[str]:
    """A temporary folder, removed on exit as tempfile's are; while it exists, a ledger this
    process claims lists it, so that `emulate clean` removes it after a SIGKILL (a killed run
    left its generated trace set in /tmp, one per kill, before)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        _FOLDERS.append(folder)
        try:
            yield folder
        finally:
            _FOLDERS.remove(folder)


class FabricActive(EnvironmentProblem):
    """A state file says a fabric is up (or a killed run left one behind)."""


def process_start_ticks(pid: int) -> int | None:
    """When a process started (field 22 of /proc/PID/stat), to tell it from a later process that
    reused its pid; None when no such process exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces: count fields after its closing parenthesis.
    return int(stat.rsplit(")", 1)[1].split()[19])


def owner_alive(state: dict[str, Any]) -> bool:
    """Is the process that wrote this state file still running (same pid AND same start)?"""
    pid = int(state.get("pid", 0))
    if not pid:
        return False
    started = process_start_ticks(pid)
    return started is not None and started == state.get("pid_start_ticks", started)


@dataclass
class Ledger:
    """The resources of one fabric, mirrored to the state file on every change."""

    path: Path
    owner: str
    resources: list[Resource] = field(default_factory=list)

    @classmethod
    def claim(cls, owner: str, path: Path | None = None) -> Ledger:
        """Create the state file; refuse when one exists (an active or abandoned fabric)."""
        path = path or state_path()
        header = _header(owner)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise FabricActive(_active_message(path)) from None
        except OSError as exc:
            raise EnvironmentProblem(f"cannot create the state file {path}: {exc}") from None
        with os.fdopen(fd, "w") as f:
            json.dump(header, f)
        ledger = cls(path, owner)
        if _FOLDERS:
            ledger.record({"kind": "folder", "path": folder} for folder in _FOLDERS)
        return ledger

    def record(self, items: Iterable[Resource]) -> None:
        self.resources.extend(items)
        self._write()

    def _write(self) -> None:
        doc = {**_header(self.owner), "resources": self.resources}
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self.path)

    def release(self) -> list[str]:
        """Release everything in reverse order; remove the state file when all is gone.
        Returns a description of each resource that existed and was removed. The folders are
        the owner's to remove (owned_folder, still in use at teardown): they leave the list."""
        held = [r for r in self.resources if r["kind"] != "folder"]
        removed, remaining = release_resources(held, one_by_one=False)
        self.resources = remaining
        if remaining:
            self._write()
            raise EnvironmentProblem(
                f"could not release {len(remaining)} resources (first: {describe(remaining[-1])}); "
                f"they stay listed in {self.path} for `emulate clean`"
            )
        self.path.unlink(missing_ok=True)
        return removed


def _header(owner: str) -> dict[str, Any]:
    pid = os.getpid()
    return {
        "owner": owner,
        "pid": pid,
        "pid_start_ticks": process_start_ticks(pid),
        "resources": [],
    }


def _active_message(path: Path) -> str:
    try:
        doc = json.loads(path.read_text())
        pid = int(doc.get("pid", 0))
        owner = doc.get("owner", "?")
    except (OSError, ValueError):
        return f"{path} exists but is unreadable; inspect it, then run `emulate clean`"
    if owner_alive(doc):
        return f"a {owner} fabric is active (pid {pid}, {path}); stop it before bringing up another"
    return f"a killed run (pid {pid}) left a {owner} fabric behind ({path}); run `emulate clean`"


def clean_state(path: Path) -> tuple[list[str], int] | None:
    """What `emulate clean` does: release what the state file at `path` lists, one by one, and
    remove the file. None when there is no file; (removed, the pid that wrote it) otherwise.
    Refused while that process runs (it releases its own), or when something remains."""
    state = load_state(path)
    if state is None:
        return None
    pid = int(state.get("pid", 0))
    if pid != os.getpid() and owner_alive(state):
        raise EnvironmentProblem(
            f"the {state.get('owner', '?')} fabric in {path} belongs to running pid {pid}; "
            "stop that run (Ctrl-C) and it releases its own resources"
        )
    removed, remaining = release_resources(list(state.get("resources", [])))
    if remaining:
        state["resources"] = remaining
        path.write_text(json.dumps(state))
        raise EnvironmentProblem(
            f"removed {len(removed)} resources but {len(remaining)} remain (listed in {path})"
        )
    path.unlink(missing_ok=True)
    return removed, pid


def load_state(path: Path | None = None) -> dict[str, Any] | None:
    path = path or state_path()
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise EnvironmentProblem(f"{path} is not valid JSON ({exc}); inspect it by hand") from None
    return doc


def describe(r: Resource) -> str:
    where = f" in {r['netns']}" if r.get("netns") else ""
    if r["kind"] == "netns":
        return f"namespace {r['name']}"
    if r["kind"] == "netns_name":
        return f"namespace name {r['name']} (of process {r.get('pid')}, not ours)"
    if r["kind"] == "offload":
        return f"{r['feature']} back {r['value']} on {r['dev']}{where}"
    if r["kind"] == "bpf_prog":
        return f"BPF program {r['id']} ({r.get('dev')}{where})"
    if r["kind"] == "xdp":
        return f"XDP program {r['id']} on {r.get('dev')}{where}"
    if r["kind"] == "qdisc":
        return f"qdisc {r['parent']} on {r['dev']}{where}"
    if r["kind"] == "address":
        return f"address {r['cidr']} on {r['dev']}{where}"
    if r["kind"] == "route":
        return f"route {r['prefix']}{where}"
    if r["kind"] == "vxlan":
        return f"VXLAN device {r['name']}{where}"
    if r["kind"] == "nft_table":
        return f"nftables table {r['family']} {r['name']}{where or ' in the root namespace'}"
    if r["kind"] == "moved_link":
        return f"interface {r['name']} moved into {r['netns']}"
    if r["kind"] == "process":
        return f"process {r['pid']} ({r['name']})"
    if r["kind"] == "folder":
        return f"folder {r['path']}"
    return f"{r['kind']} {r.get('name')}{where}"


# --- release, by kind: each takes resources of one kind and one namespace -------------------


def _release_cmd(r: Resource) -> Cmd:
    ns = r.get("netns")
    kind = r["kind"]
    if kind in ("veth", "vxlan"):
        return ip("link", "del", "dev", r["name"], netns=ns)
    if kind == "bpf_prog":
        # Deleting the egress filter drops the last reference to the program.
        return tc("filter", "del", "dev", r["dev"], "egress", netns=ns)
    if kind == "qdisc":
        return tc("qdisc", "del", "dev", r["dev"], r["parent"], netns=ns)
    if kind == "address":
        return ip("addr", "del", r["cidr"], "dev", r["dev"], netns=ns)
    if kind == "route":
        return ip("route", "del", r["prefix"], netns=ns)
    if kind == "mtu":
        return ip("link", "set", "dev", r["dev"], "mtu", str(r["mtu"]), netns=ns)
    if kind == "moved_link":
        # Back to the initial namespace (PID 1's) where it came from.
        return ip("link", "set", "dev", r["name"], "netns", "1", netns=ns)
    if kind == "offload":
        return Cmd("ethtool", ("-K", r["dev"], r["feature"], r["value"]), ns)
    raise ValueError(f"unknown resource kind {kind}")


def _exists(r: Resource, live_netns: set[str]) -> bool:
    ns = r.get("netns")
    if ns and ns not in live_netns:
        return False
    kind = r["kind"]
    if kind == "bpf_prog":
        return _loaded_tags().get(int(r["id"])) == r.get("tag")
    if kind == "xdp":
        return _loaded_tags().get(int(r["id"])) == r.get("tag") and _xdp_attached(r)
    if kind == "nft_table":
        return bool(run(underlay_guard.exists_cmd(r), check=False).strip())
    if kind in ("mtu", "offload"):
        return False  # the interface is gone, or it failed for a reason already reported
    if kind in ("veth", "vxlan", "moved_link"):
        return bool(run(ip("-o", "link", "show", "dev", r["name"], netns=ns), check=False))
    if kind == "qdisc":
        out = run(tc("qdisc", "show", "dev", r["dev"], netns=ns), check=False)
        return (" clsact " in out) if r["parent"] == "clsact" else _has_root_qdisc(out, r)
    if kind == "address":
        out = run(ip("-o", "addr", "show", "dev", r["dev"], netns=ns), check=False)
        return f" {r['cidr']} " in out
    if kind == "route":
        out = run(ip("route", "show", r["prefix"], netns=ns), check=False)
        return bool(out.strip())
    return False


def _has_root_qdisc(out: str, r: Resource) -> bool:
    handle = r.get("handle", "1:")
    return any(
        line.split()[2:3] == [handle] and " root " in line for line in out.splitlines() if line
    )


def _release_group(group: list[Resource], live_netns: set[str]) -> tuple[list[str], list[Resource]]:
    """Release one run of same-kind resources in one namespace; (removed, still present)."""
    kind = group[0]["kind"]
    if kind in ("netns", "netns_name"):
        # a name given to another process's namespace (`ip netns attach`) goes the same way:
        # deleting the name leaves that namespace to its process
        present = [r for r in group if r["name"] in live_netns]
        if present:
            run_batch([ip("netns", "del", r["name"]) for r in present], force=True)
        left = existing_netns()
        return (
            [describe(r) for r in present if r["name"] not in left],
            [r for r in present if r["name"] in left],
        )
    if kind == "xdp":
        return _release_xdp(group, live_netns)
    if kind == "nft_table":
        return _release_nft(group, live_netns)
    if kind == "process":
        return _release_processes(group)
    if kind == "folder":  # only what the state file names (a killed run's temporary folders)
        present = [r for r in group if os.path.isdir(r["path"])]
        for r in present:
            shutil.rmtree(r["path"], ignore_errors=True)
        return (
            [describe(r) for r in present if not os.path.exists(r["path"])],
            [r for r in present if os.path.exists(r["path"])],
        )
    ns = group[0].get("netns")
    if kind == "offload":  # ethtool: one call each (no -batch of ip's kind)
        if ns and ns not in live_netns:
            return [], []
        removed = []
        for r in group:
            try:
                run(_release_cmd(r))
                removed.append(describe(r))
            except EnvironmentProblem:
                pass  # the interface is gone (with its namespace's node): nothing to give back
        return removed, []
    if ns and ns not in live_netns:
        return [], []
    cmds = [_release_cmd(r) for r in group]
    stderr = run_batch(cmds, force=True)
    failed = _failed_lines(stderr)
    removed = [describe(r) for i, r in enumerate(group) if i not in failed]
    still = [r for i, r in enumerate(group) if i in failed and _exists(r, live_netns)]
    return removed, still


def _same_process(r: Resource) -> bool:
    """Is the recorded process (pid AND start time) still there and not yet a zombie?"""
    started = process_start_ticks(int(r["pid"]))
    if started is None or started != r["start_ticks"]:
        return False
    try:
        state = Path(f"/proc/{r['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _release_processes(
    group: list[Resource], wait_s: float = 5.0
) -> tuple[list[str], list[Resource]]:
    """Kill recorded processes (a Mininet node's shell, which holds its namespace) by pid, only
    while the pid is still the recorded process; its own process group with it when it leads
    one (mnexec -d makes each node shell a session leader). Reaped when it is our child."""
    present = [r for r in group if _same_process(r)]
    for r in present:
        pid = int(r["pid"])
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + wait_s
    still = present
    while still and time.monotonic() < deadline:
        still = [r for r in still if _same_process(r)]
        if still:
            time.sleep(0.02)
    for r in present:
        # a zombie of ours is reaped here; a check before it turned zombie reaped nothing
        with contextlib.suppress(ChildProcessError):  # not ours: init reaps it
            os.waitpid(int(r["pid"]), os.WNOHANG)
    return [describe(r) for r in present if r not in still], still


def _xdp_attached(r: Resource) -> bool:
    """Is the recorded XDP program (by id) the one attached to the recorded interface now?"""
    out = run(ip("-d", "-j", "link", "show", "dev", r["dev"], netns=r.get("netns")), check=False)
    xdp = (json.loads(out)[0].get("xdp") or {}) if out.strip() else {}
    attached = [xdp.get("prog", {})] + [a.get("prog", {}) for a in xdp.get("attached", [])]
    return any(int(p.get("id", 0)) == int(r["id"]) for p in attached)


def _xdp_links(r: Resource) -> list[int]:
    """The BPF links of the recorded XDP program (an AF_XDP port, emulator/engine/af_xdp.py,
    attaches its program with one), found by program id."""
    links = json.loads(run(Cmd("bpftool", ("-j", "link", "show"))) or "[]")
    return [
        int(link["id"])
        for link in links
        if link.get("type") == "xdp" and int(link.get("prog_id", -1)) == int(r["id"])
    ]


def _release_xdp(group: list[Resource], live_netns: set[str]) -> tuple[list[str], list[Resource]]:
    """Detach recorded XDP programs through their links. A link dies with the last process
    holding it, so after a kill there is usually nothing left; only the recorded program (id
    and tag, attached to the recorded interface) is touched, never one found by name."""
    removed: list[str] = []
    still: list[Resource] = []
    tags = _loaded_tags()
    for r in group:
        if r.get("netns") and r["netns"] not in live_netns:
            continue
        if tags.get(int(r["id"])) != r.get("tag") or not _xdp_attached(r):
            continue
        for link in _xdp_links(r):
            run(Cmd("bpftool", ("link", "detach", "id", str(link))), check=False)
        if _xdp_attached(r):
            still.append(r)
        else:
            removed.append(describe(r))
    return removed, still


def _release_nft(group: list[Resource], live_netns: set[str]) -> tuple[list[str], list[Resource]]:
    """Delete recorded nftables tables (the underlay's guard, fabrics/underlay_guard.py) by the
    name recorded, one nft call each (nft has no -batch of ip's kind)."""
    removed: list[str] = []
    still: list[Resource] = []
    for r in group:
        if r.get("netns") and r["netns"] not in live_netns:
            continue
        if not _exists(r, live_netns):
            continue
        run(underlay_guard.release_cmd(r), check=False)
        if _exists(r, live_netns):
            still.append(r)
        else:
            removed.append(describe(r))
    return removed, still


def _failed_lines(stderr: str) -> set[int]:
    marker = "Command failed -:"
    out: set[int] = set()
    for line in stderr.splitlines():
        if marker in line:
            try:
                out.add(int(line.split(marker, 1)[1].split()[0]) - 1)
            except ValueError:
                continue
    return out


def release_resources(
    resources: list[Resource],
    progress: Callable[[str], None] | None = None,
    *,
    one_by_one: bool = True,
) -> tuple[list[str], list[Resource]]:
    """Release in reverse order, batching consecutive resources of one kind and namespace.

    one_by_one=False lets the deletion of an owned namespace release what lives inside it
    (veths, qdiscs, filters): the kernel tears those down with the namespace, and deleting veths
    one at a time costs an RCU grace period each (seconds for a 128-host fabric). `emulate clean`
    releases one by one, so it can report exactly what a killed run left."""
    removed: list[str] = []
    remaining: list[Resource] = []
    live = existing_netns()
    owned_ns = {r["name"] for r in resources if r["kind"] == "netns"}
    rev = list(reversed(resources))
    if not one_by_one:
        # Interfaces moved in from the root namespace keep their qdiscs and MTU when they move
        # back, so everything on them is still released one by one.
        moved = {(r["netns"], r["name"]) for r in resources if r["kind"] == "moved_link"}

        def with_namespace(r: Resource) -> bool:
            ns = r.get("netns")
            return ns in owned_ns and r["kind"] != "moved_link" and (ns, r.get("dev")) not in moved

        removed += [
            f"{describe(r)} (with its namespace)"
            for r in rev
            if with_namespace(r) and r["netns"] in live
        ]
        rev = [r for r in rev if not with_namespace(r)]
    i = 0
    while i < len(rev):
        kind, ns = rev[i]["kind"], rev[i].get("netns")
        j = i
        # Namespaces batch together; everything else per namespace.
        while (
            j < len(rev)
            and rev[j]["kind"] == kind
            and (kind in ("netns", "netns_name") or rev[j].get("netns") == ns)
        ):
            j += 1
        group_removed, still = _release_group(rev[i:j], live)
        removed += group_removed
        remaining += still
        if kind in ("netns", "netns_name"):
            live = existing_netns()
        if progress and group_removed:
            progress(f"released {len(group_removed)} x {kind}")
        i = j
    remaining += _programs_still_loaded(resources, remaining)
    remaining.reverse()
    return removed, remaining


def _loaded_tags() -> dict[int, str]:
    progs = json.loads(run(Cmd("bpftool", ("-j", "prog", "show"))) or "[]")
    return {int(p["id"]): str(p.get("tag")) for p in progs}


def _programs_still_loaded(
    resources: list[Resource], already: list[Resource], wait_s: float = 10.0
) -> list[Resource]:
    """BPF programs are freed after an RCU grace period (or when a deleted namespace is cleaned
    up, asynchronously): wait a bounded time for every recorded one to be gone."""
    progs = [r for r in resources if r["kind"] in ("bpf_prog", "xdp") and r not in already]
    if progs:
        time.sleep(0.05)  # freed after an RCU grace period; skip one useless poll
    deadline = time.monotonic() + wait_s
    while progs:
        tags = _loaded_tags()
        progs = [r for r in progs if tags.get(int(r["id"])) == r.get("tag")]
        if not progs or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return progs
