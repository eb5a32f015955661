"""The project's layering, read from its own imports (ast, no import executed).

Data flows one way (docs/architecture.md): trace -> schedule -> transport -> backend -> events ->
collectors -> studies. The run (emulator.run) sits above the seam (emulator.backends.base) and
never behind it. So a lower layer never imports a higher one:

- the base modules (errors, config, netns, events, latency, signals, rtnetlink) import no other project module but
  each other;
- the transport (the sans-I/O core) imports only itself and the base;
- the engine imports no collector and nothing that runs it (backends, run pipeline, commands,
  studies);
- the backends import nothing from the run; only the backends (and the bench, which measures
  the engine itself) import the engine and the simulator; the run, planning, time dilation and
  the studies reach a backend only through the seam (emulator.backends and its base);
- fabrics import neither the engine, the schedule, the collectors, the backends nor the run;
- collectors import neither the engine, fabrics, the backends nor the run: they consume events;
  and no study (a study's page registers itself with the collectors' page kit);
- no import cycle among the project's modules.

Every import counts, at module level or inside a function (a late import is still a
dependency), except those under `if TYPE_CHECKING:` (annotations only, never executed).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("emulator", "fabrics", "collectors", "bench")
BASE = (
    "emulator.errors",
    "emulator.config",
    "emulator.netns",
    "emulator.events",
    "emulator.latency",
    "emulator.signals",
    "emulator.rtnetlink",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, package: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(module, names imported from it) for every import under `tree`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            yield from (found for n in node.orelse for found in _imports(n, package))
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            yield target, tuple(alias.name for alias in node.names)
        yield from _imports(node, package)


def project_graph() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    modules = {module_name(p): p for p in files}

    def longest(target: str) -> str:
        """The longest project module a dotted name names (a symbol's module, or a package)."""
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for target, names in _imports(ast.parse(path.read_text(), str(path)), package):
            # `from pkg import module` depends on the module; `from module import symbol` (or a
            # symbol the package itself defines) on that module
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            for dependency in submodules or [longest(target)]:
                if dependency and dependency != name:
                    found.add(dependency)
            if submodules and len(submodules) < len(names) and longest(target) != name:
                found.add(longest(target))
        graph[name] = found
    return graph


GRAPH = project_graph()


def _in(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(rule: str) -> list[str]:
    out = []
    for module, targets in sorted(GRAPH.items()):
        for target in sorted(targets):
            if target == "emulator":
                continue  # the package's own __init__ (a docstring)
            if RULES[rule](module, target):
                out.append(f"{module} imports {target}")
    return out


RULES = {
    "base imports only base": lambda m, t: m in BASE and t not in BASE,
    "transport imports only itself and the base": lambda m, t: (
        _in(m, "emulator.transport") and not _in(t, "emulator.transport", *BASE)
    ),
    "engine imports no collector and nothing that runs it": lambda m, t: (
        _in(m, "emulator.engine")
        and _in(
            t,
            "collectors",
            "emulator.backends",
            "emulator.run",
            "emulator.commands",
            "emulator.studies",
            "emulator.cli",
        )
    ),
    "fabrics import no engine, schedule, collector or run": lambda m, t: (
        _in(m, "fabrics")
        and _in(
            t,
            "emulator.engine",
            "emulator.schedule",
            "collectors",
            "emulator.backends",
            "emulator.run",
        )
    ),
    "backends import nothing from the run": lambda m, t: (
        _in(m, "emulator.backends") and _in(t, "emulator.run", "emulator.commands", "emulator.cli")
    ),
    # (emulator.engine.params is the scenario's `engine:` section: configuration, not the engine)
    "only backends (and the bench) import the engine and the simulator": lambda m, t: (
        _in(t, "emulator.engine", "emulator.sim")
        and t != "emulator.engine.params"
        and not _in(m, "emulator.engine", "emulator.sim", "emulator.backends", "bench")
    ),
    "the run, planning and time dilation reach a backend only through the seam": lambda m, t: (
        _in(m, "emulator.run", "emulator.planning", "emulator.timescale", "emulator.studies")
        and _in(t, "emulator.backends")
        and t not in ("emulator.backends", "emulator.backends.base")
    ),
    "planning and time dilation import no run": lambda m, t: (
        _in(m, "emulator.planning", "emulator.timescale") and _in(t, "emulator.run")
    ),
    "collectors import no engine, fabric or run": lambda m, t: (
        _in(m, "collectors")
        and _in(
            t,
            "emulator.engine",
            "emulator.backends",
            "fabrics",
            "emulator.run",
            "emulator.commands",
        )
    ),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_layering_rule(rule: str) -> None:
    assert violations(rule) == []


def test_collectors_import_no_study() -> None:
    """The studies build on the collectors (tables, plots, the page kit); a study's page registers
    itself with the kit (collectors.pages.kit), so no collector needs a study."""
    found = [
        f"{module} imports {target}"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if _in(module, "collectors") and _in(target, "emulator.studies")
    ]
    assert found == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in graph:
                continue
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycle() -> None:
    assert cycles(GRAPH) == []


def test_the_checks_see_a_broken_rule() -> None:
    """The rules and the cycle finder catch what they are for (so a silent parser cannot pass)."""
    assert "emulator.engine.coordinator" in GRAPH
    assert "emulator.transport.dcqcn" in GRAPH["emulator.transport.congestion"]
    rule = RULES["engine imports no collector and nothing that runs it"]
    assert rule("emulator.engine.worker", "collectors.recorder")
    assert not rule("emulator.engine.worker", "emulator.transport.sender")
    assert RULES["transport imports only itself and the base"](
        "emulator.transport.params", "emulator.schedule.params"
    )
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
