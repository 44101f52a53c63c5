"""The package's rooms import one way only (docs/architecture.md, "Rooms and the one-way rule"): the leaves ->
methods -> kernels -> engine -> serving, costs, testing -> tiny -> experiments -> tools, integrations, the CLI,
with evals beside methods (evals serve tiny and the rooms above it, and know nothing of models); no circles.
Inside experiments/, every package the catalog finds stands on the spine alone, but for a reader of results
(claims), which may import the modules other experiments' records name (`records=`).

Every `import` and `from ... import` counts, inside functions too: a lazy import is still an arrow. The modules
checked are every file under the package and under every folder on the experiments' path (`spine.catalog`
walks the same), so a new package or experiment is covered the moment it exists: none is listed here."""
from __future__ import annotations

import ast
from pathlib import Path

import acceptmoe.experiments
from acceptmoe.experiments.spine import catalog

PACKAGE = Path(__file__).resolve().parents[2] / "acceptmoe"
EXPERIMENTS = "acceptmoe.experiments"

# room -> rank; a module may import its own room or a room of lower rank (evals: only the leaves)
RANK = {"errors": 0, "commands": 0, "yamlfile": 0, "registry": 0, "paths": 0, "methods": 1, "evals": 1,
        "kernels": 2, "engine": 3, "serving": 4, "costs": 4, "testing": 4, "tiny": 5, "experiments": 6,
        "tools": 7, "integrations": 7, "cli": 7}
LEAVES = {"errors", "commands", "yamlfile", "registry", "paths"}
EVALS_READERS = {"tiny", "experiments", "tools", "integrations", "cli"}     # the rooms that grade or read tasks
SPINE_ONLY = {"integrations"}            # rooms above experiments that stand on the spine, not on an experiment


def _module(parts: tuple[str, ...], prefix: list[str]) -> str:
    return ".".join(prefix + list(parts[:-1] if parts[-1] == "__init__" else parts))


def files() -> dict[str, Path]:
    """Module -> file: every file of the package, and of every folder on the experiments package's path."""
    out = {_module(p.relative_to(PACKAGE.parent).with_suffix("").parts, []): p for p in PACKAGE.rglob("*.py")}
    for entry in map(Path, acceptmoe.experiments.__path__):
        for p in entry.rglob("*.py"):
            out.setdefault(_module(p.relative_to(entry).with_suffix("").parts, EXPERIMENTS.split(".")), p)
    return out


def room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "acceptmoe" else ("__main__" if module == "acceptmoe" else None)


def imports(module: str, path: Path, modules: set[str]) -> set[str]:
    """Absolute names of the acceptmoe modules `path` (the module `module`) imports."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
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
    return {m for m in out if m in modules and m != module}


def graph() -> dict[str, set[str]]:
    found = files()
    return {m: imports(m, p, set(found)) for m, p in found.items()}


def back_arrows(g: dict[str, set[str]]) -> list[str]:
    bad = []
    for src, targets in g.items():
        a = room(src)
        if a in (None, "__main__") or src.endswith("__main__"):
            continue
        for dst in targets:
            b = room(dst)
            if b == a or b is None:
                continue
            allowed = b in LEAVES or (a not in LEAVES and a != "evals" and b != "evals" and RANK[b] < RANK[a]) \
                or (b == "evals" and a in EVALS_READERS)
            if a in SPINE_ONLY and b == "experiments" and part(dst) != catalog.SPINE:
                allowed = False
            if not allowed:
                bad.append(f"{src} -> {dst}")
    return sorted(bad)


def part(module: str) -> str | None:
    """The package (or top-level module) of experiments/ that `module` belongs to."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["acceptmoe", "experiments"] else None


def record_modules() -> dict[str, set[str]]:
    """Experiment package -> the modules its record lets a reader of results import (`records=`)."""
    return {r.name: {f"{r.package}.{m}" for m in r.records} for r in catalog.ordered()}


def experiment_arrows(g: dict[str, set[str]]) -> list[str]:
    """Inside experiments/: the spine imports only itself; every other part (each package the catalog finds, and
    the top-level modules: `tables`) imports the spine and itself, and a reader (a record with `reads=True`)
    also the modules other experiments' records name; nothing else."""
    readers = {r.name for r in catalog.ordered() if r.reads}
    readable = set().union(*record_modules().values())
    bad = []
    for src, targets in g.items():
        a = part(src)
        if a is None:
            continue
        for dst in targets:
            b = part(dst)
            if b is None or b == a or (b == catalog.SPINE and a != catalog.SPINE):
                continue
            if a in readers and dst in readable:
                continue
            bad.append(f"{src} -> {dst}")
    return sorted(bad)


def test_no_import_arrow_runs_back_up():
    bad = back_arrows(graph())
    assert not bad, "imports that run against the data flow:\n" + "\n".join(bad)


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


def test_experiments_stand_on_the_spine_and_not_on_each_other():
    bad = experiment_arrows(graph())
    assert not bad, "experiment packages importing each other (or the spine importing one):\n" + "\n".join(bad)


def test_every_experiment_package_declares_its_record():
    """Every package under experiments/ but the spine is an experiment with a record: the catalog resolves each
    (a package without one is an error there, never an exemption here), and what a record names exists."""
    names = catalog.package_names()
    assert names and set(names) == {r.name for r in catalog.ordered()}
    for r in catalog.ordered():
        folder = r.folder()
        refs = [*r.tables.values(), *r.plan.values(), *([r.config] if r.config else [])]
        for module in {ref.partition(":")[0] for ref in refs} | set(r.records):
            assert (folder / f"{module.replace('.', '/')}.py").is_file(), f"{r.package}: no module {module!r}"


def test_readers_read_records_only():
    """The modules a record opens to readers import no runner and no command: reading results never runs an
    experiment."""
    g = graph()
    for package, allowed in record_modules().items():
        for module in allowed:
            assert module in g, f"{package}'s record names {module}, which does not exist"
            runners = {m for m in g[module] if m.endswith((".runner", ".commands"))}
            assert not runners, f"{module} (a record module of {package}) imports {runners}"


def test_every_room_is_known():
    rooms = {room(m) for m in files()} - {"__main__", None}
    assert rooms <= set(RANK), f"rooms without a rank: {rooms - set(RANK)}"
