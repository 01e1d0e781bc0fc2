"""The package's shape: no module over 600 lines, and no import cycle between `coda` modules (every import
counts, including those inside functions: a cycle there is still two modules that need each other)."""

from __future__ import annotations

import ast
from pathlib import Path

CODA = Path(__file__).resolve().parent.parent / "coda"
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    out = {}
    for p in CODA.rglob("*.py"):
        parts = list(p.relative_to(CODA.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the `coda` modules it imports (``from pkg import name`` counts as pkg.name when that is a
    module, else as pkg)."""
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        pkg = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else resolve(base) for a in node.names
                ]
            graph[m] |= {t for t in targets if t and t != m}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_coda_modules():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_module_over_600_lines():
    long = {
        str(p.relative_to(CODA.parent)): n
        for p in CODA.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_loop_does_not_import_a_simulator():
    """`coda.coevolve` reaches simulators only through the `Domain` interface: `make_loop` builds its domain
    from the registry (`coda.domains`), which imports a simulator only when asked."""
    graph = import_graph()
    assert not {t for t in graph["coda.domains"] if t != "coda.domains"}, graph["coda.domains"]
    for m in (
        "coda.coevolve.loop",
        "coda.coevolve.domain",
        "coda.coevolve.mode_book",
        "coda.coevolve.trainer",
        "coda.coevolve.schedule",
        "coda.coevolve.state",
        "coda.coevolve.methods",
    ):
        sims = {t for t in graph[m] if t.startswith(("coda.sim", "coda.libero_pro", "coda.domains."))}
        assert not sims, f"{m} imports {sims}"


# The layers, lowest first (docs/ARCHITECTURE.md): a module may import its own layer and those below.
LAYERS = (
    # the numerics pin, its GEMM backend and the environment helper: nothing else of coda, so any entry point
    # can run them first
    ("coda.numerics", "coda.gemm", "coda.environ"),
    ("coda.config", "coda.errors", "coda.files", "coda.progress"),
    ("coda.sim",),
    ("coda.data", "coda.evaluate"),
    ("coda.learn",),
    ("coda.memory",),
    ("coda.engine",),
    ("coda.domains",),  # the Domain implementations and their registry
    ("coda.coevolve",),
    ("coda.scaling", "coda.regimes", "coda.libero_pro", "coda.commands"),
    ("coda.report", "coda.maintenance", "coda.differences", "coda.verify"),
    ("coda.cli", "coda.__main__", "coda"),
)


def layer_of(module: str) -> int:
    """The layer of the longest prefix that names the module."""
    best, depth = None, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > depth:
                best, depth = i, len(p)
    assert best is not None, f"{module} is in no layer"
    return best


def test_every_module_imports_only_its_layer_and_those_below():
    upward = sorted(
        f"{a} -> {b}" for a, targets in import_graph().items() for b in targets if layer_of(b) > layer_of(a)
    )
    assert not upward, "imports of a higher layer: " + "; ".join(upward)


def test_no_function_over_80_lines_in_the_loop_and_the_domains():
    long = []
    for package in ("coevolve", "domains"):
        for p in sorted((CODA / package).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    n = node.end_lineno - node.lineno + 1
                    if n > 80:
                        long.append(f"{p.relative_to(CODA.parent)}:{node.name} ({n} lines)")
    assert not long, f"functions over 80 lines: {long}"
