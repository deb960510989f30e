"""The package layout holds the rule stated in satbench/__init__.py: imports run one way along the
stages, the deriving side never imports the measuring side, and no import cycle exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import satbench

SRC = Path(satbench.__file__).parent
STAGES = ["errors", "config", "records", "host", "gguf", "http", "workload", "server", "load", "run",
          "metrics", "analysis", "saturation", "capability", "report", "pipeline", "api", "fleet",
          "cli"]
DERIVING = {"metrics", "analysis", "saturation", "report"}
MEASURING = {"http", "load", "run"}
TOP_LEVEL_MODULES = {"__init__.py", "errors.py", "pipeline.py"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every satbench module `name` imports, at any depth (in functions, under TYPE_CHECKING)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != name and target != "satbench":
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _stage(name: str) -> str:
    return name.split(".")[1] if "." in name else "satbench"


def test_every_module_lives_in_a_stage_package():
    stray = sorted(p.name for p in SRC.glob("*.py") if p.name not in TOP_LEVEL_MODULES)
    assert stray == []
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages | {"errors", "pipeline"} == set(STAGES)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != "satbench"))
def test_a_module_imports_only_its_own_stage_or_earlier_ones(name):
    stage = STAGES.index(_stage(name))
    later = sorted(d for d in GRAPH[name] if STAGES.index(_stage(d)) > stage)
    assert later == [], f"{name} imports a later stage"
    if _stage(name) in DERIVING:
        measuring = sorted(d for d in GRAPH[name] if _stage(d) in MEASURING)
        assert measuring == [], f"{name} (deriving side) imports the measuring side"


def test_there_is_no_import_cycle():
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep] if dep in path else [node, dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_checker_sees_a_later_import():
    """The rule's own check: the CLI imports the pipeline, so the graph has that edge."""
    assert "satbench.pipeline" in {d for d in GRAPH["satbench.cli.main"]}
    assert STAGES.index(_stage("satbench.pipeline")) > STAGES.index(_stage("satbench.report.bundle"))


def test_docs_layout_lists_the_stages_in_order():
    table = (Path(__file__).resolve().parents[2] / "docs" / "layout.md").read_text()
    rows = [line.split("|")[1].strip().strip("`") for line in table.splitlines()
            if line.startswith("| `")]
    assert rows == STAGES
