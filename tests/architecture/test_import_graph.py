"""The package's rooms import one way only: errors -> methods -> kernels -> engine -> serving, costs -> tiny ->
experiments -> tools, integrations, the CLI, with evals beside methods (evals serve tiny and the rooms above it,
and know nothing of models); no circles. An integration stands on the experiments' spine, never on an
experiment package.

Every `import` and `from ... import` counts, inside functions too: a lazy import is still an arrow."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "acceptmoe"

# room -> rank; a module may import its own room or a room of lower rank (evals: only the leaves)
RANK = {"errors": 0, "commands": 0, "yamlfile": 0, "registry": 0, "paths": 0, "methods": 1, "evals": 1,
        "kernels": 2, "engine": 3, "serving": 4, "costs": 4, "tiny": 5, "experiments": 6,
        "tools": 7, "integrations": 7, "cli": 7}
LEAVES = {"errors", "commands", "yamlfile", "registry", "paths"}
EVALS_READERS = {"tiny", "experiments", "tools", "integrations", "cli"}     # the rooms that grade or read tasks
SPINE_ONLY = {"integrations"}            # rooms above experiments that stand on the spine, not on an experiment


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "acceptmoe" else ("__main__" if module == "acceptmoe" else None)


def imports(path: Path) -> set[str]:
    """Absolute names of the acceptmoe modules `path` imports."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:                       # `from pkg import module` imports the module, else pkg
                out.add(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target)
    return {m for m in out if m in modules and m != me}


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def test_no_import_arrow_runs_back_up():
    bad = []
    for src, targets in graph().items():
        a = room(src)
        if a in (None, "__main__") or src.endswith("__main__"):
            continue
        for dst in targets:
            b = room(dst)
            if b == a or b is None:
                continue
            allowed = b in LEAVES or (a not in LEAVES and a != "evals" and b != "evals" and RANK[b] < RANK[a]) \
                or (b == "evals" and a in EVALS_READERS)
            if a in SPINE_ONLY and b == "experiments" and not dst.startswith("acceptmoe.experiments.spine"):
                allowed = False
            if not allowed:
                bad.append(f"{src} -> {dst}")
    assert not bad, "imports that run against the data flow:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    g = graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(g.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]) if nxt in stack else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for n in sorted(g):
        if n not in state:
            visit(n, [n])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


EXPERIMENT_PACKAGES = ("table1", "throughput", "study", "replay", "batch", "claims")   # each on the spine alone

# The one exception: `claims` reads other experiments' results, through their record builders only (the modules
# below: tables, records, reports and the configs those load), never a runner or a command.
READERS = {"claims": {"acceptmoe.experiments.table1.table", "acceptmoe.experiments.throughput.records",
                      "acceptmoe.experiments.throughput.timing",
                      "acceptmoe.experiments.throughput.report", "acceptmoe.experiments.study.tables",
                      "acceptmoe.experiments.study.config", "acceptmoe.experiments.replay.report",
                      "acceptmoe.experiments.batch.records"}}


def test_experiments_stand_on_the_spine_and_not_on_each_other():
    """Inside experiments/: the spine imports no experiment package; an experiment package imports the spine
    and itself only (no runner inside another runner), except a reader's listed record modules (`READERS`);
    `tables` may import any of them (the tools may too: they rank above experiments)."""
    def part(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == ["acceptmoe", "experiments"] else None
    bad = []
    for src, targets in graph().items():
        a = part(src)
        if a not in ("spine",) + EXPERIMENT_PACKAGES:
            continue
        for dst in targets:
            b = part(dst)
            if b is not None and b != a and b != "spine" and dst not in READERS.get(a, ()):
                bad.append(f"{src} -> {dst}")
    assert not bad, "experiment packages importing each other (or the spine importing one):\n" + "\n".join(bad)


def test_readers_read_records_only():
    """A reader's listed modules exist and import no runner: reading results never runs an experiment."""
    g = graph()
    for reader, allowed in READERS.items():
        assert reader in EXPERIMENT_PACKAGES
        for module in allowed:
            assert module in g, f"{reader} may read {module}, which does not exist"
            runners = {m for m in g[module] if m.endswith((".runner", ".commands"))}
            assert not runners, f"{module} (read by {reader}) imports {runners}"
        used = {dst for src, targets in g.items() if src.startswith(f"acceptmoe.experiments.{reader}.")
                for dst in targets if dst in allowed}
        assert used == allowed, f"{reader}: listed but not imported: {allowed - used}"


def test_every_room_is_known():
    rooms = {room(module_name(p)) for p in PACKAGE.rglob("*.py")} - {"__main__", None}
    assert rooms <= set(RANK), f"rooms without a rank: {rooms - set(RANK)}"
