"""No import circles in ``envs`` and ``jaxmarl_llm``: every import counts, whether at
module level, inside a function or under ``TYPE_CHECKING``, so a circle cannot hide in a
deferred import. Names two modules share belong in a module below both."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "jaxmarl_llm")


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``PACKAGES``."""
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _known(name: str, known: dict[str, Path]) -> str | None:
    """``name`` or the longest of its parents that is one of ``known`` (``a.b.f`` for a
    function ``f`` of module ``a.b`` is ``a.b``)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imported(module: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The modules of ``known`` that ``module`` imports -> the line of the first import."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [_known(a.name, known) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([node.module] if node.module else [])])
            # ``from a import b`` imports module ``a.b`` where there is one
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else _known(base, known)
                for a in node.names
            ]
        else:
            continue
        for target in targets:
            if target is not None and target != module:
                out.setdefault(target, node.lineno)
    return out


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_packages_import_no_circles():
    known = modules()
    graph = {m: imported(m, path, known) for m, path in known.items()}
    report = []
    for component in circles(graph):
        edges = [
            f"  {a}:{line} imports {b}"
            for a in component
            for b, line in sorted(graph[a].items())
            if b in component
        ]
        report.append("\n".join([" <-> ".join(component), *edges]))
    assert not report, "import circles:\n" + "\n".join(report)


def test_a_deferred_import_still_closes_a_circle(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from pkg.mod import name\n")
    known = {"pkg.mod": tmp_path / "mod.py", "pkg.probe": probe}
    assert imported("pkg.probe", probe, known) == {"pkg.mod": 2}
    graph = {"a": {"b": 3}, "b": {"c": 1}, "c": {"a": 9}, "d": {"a": 1}}
    assert circles(graph) == [["a", "b", "c"]]
