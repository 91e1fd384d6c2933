"""The package's layout (docs/architecture.md): layers import only downwards, never in a cycle,
no front door imports another, and one module imports cupy."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gpureco"
FRONT_DOORS = {"gpureco._recometrics", "gpureco._top_k", "gpureco._evaluate", "gpureco._lists", "gpureco._beyond"}
SHARED = {"gpureco._validation", "gpureco._optional", "gpureco._output"}
# What each layer may import from gpureco, besides its own folder.
ALLOWED = {
    "engine": set(),
    "shared": {"engine"},
    "data": {"engine", "shared"},
    "analysis": {"engine", "shared"},
    "front door": {"engine", "shared", "data"},
    "dask": {"engine", "shared", "data", "analysis", "front door"},
    "cli": {"engine", "shared", "data", "analysis", "front door", "dask", "package"},
    "package": {"engine", "shared", "data", "analysis", "front door", "cli", "package"},
}


def module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(name):
    if name in FRONT_DOORS:
        return "front door"
    if name in SHARED:
        return "shared"
    parts = name.split(".")
    if len(parts) > 2 and parts[1] in ("engine", "data", "analysis", "cli", "dask"):
        return parts[1]
    if name in ("gpureco.engine", "gpureco.data", "gpureco.analysis", "gpureco.cli", "gpureco.dask"):
        return parts[1]
    return "package"  # gpureco, gpureco.__main__, gpureco.datasets: the public faces


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
MODULE_NAMES = set(MODULES)


def imports_of(path):
    """The gpureco modules (and 'cupy') that the file imports, anywhere in it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            # `from . import _backend` imports the module _backend; `from .. import __version__`, the package
            submodules = {f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULE_NAMES}
            found.update(submodules)
            if node.module or len(submodules) < len(node.names):
                found.add(target)
    return {m for m in found if m.split(".")[0] in ("gpureco", "cupy", "cupyx")}


GRAPH = {name: {m for m in imports_of(path) if m in MODULES and m != name} for name, path in MODULES.items()}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_go_downwards_only(name):
    mine = layer(name)
    for target in GRAPH[name]:
        theirs = layer(target)
        if theirs == mine and mine != "front door":
            continue
        assert theirs in ALLOWED[mine], f"{name} ({mine}) imports {target} ({theirs})"


def test_no_import_cycles():
    state = {}

    def visit(name, path):
        state[name] = "open"
        for target in GRAPH[name]:
            if state.get(target) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path + [target]))
            if target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in MODULES:
        if name not in state:
            visit(name, [name])


def test_one_module_imports_cupy():
    importers = sorted(name for name, path in MODULES.items() if any(m.split(".")[0] in ("cupy", "cupyx")
                                                                       for m in imports_of(path)))
    assert importers == ["gpureco.engine._backend"]


def test_the_layers_are_seen():
    """The rules above must be looking at real modules (a renamed folder would make them vacuous)."""
    seen = {layer(name) for name in MODULES}
    assert seen == set(ALLOWED), seen
    assert FRONT_DOORS | SHARED <= set(MODULES)
    assert any(GRAPH[name] for name in FRONT_DOORS)
