"""No import cycles among llm_pipeline's modules.

Only the imports that run when a module is imported count (the top level, its `if`/`try`
blocks and class bodies; not a function's body, not `if TYPE_CHECKING:`): a cycle among those
makes whichever module is imported first see the other half-initialised, so the code works or
fails by import order. Importing `a.b.c` runs the `__init__.py` of `a` and `a.b` too, so those
are edges as well, except a module's own packages, which Python has always started first.

The imports a function makes when it runs, and those under `if TYPE_CHECKING:`, are checked
too (`test_no_cycles_through_deferred_imports`): a deferred import still makes two modules
depend on each other, so neither can be read, tested or moved without the other.

The task registry (`llm_pipeline.tasks`) imports a task's package by its dotted name
(`importlib`) when a layer first looks the task up, so no written import shows that edge. A
lookup that runs while a module is being imported (`TASKS.values()` at module level) is an
import of every task package at that moment, and counts as one in the import-time graph: a
task package that reaches such a module while it is imported would see itself
half-initialised. A lookup inside a function runs after the imports are done and is not an
edge: the layers depend on the registry and the registry on the task packages by design
(docs/architecture.md, "## Tasks"), which only the import-time graph could break.
"""

from pathlib import Path

from .module_imports import (
    PACKAGE,
    SOURCE,
    Import,
    imports_of,
    module_name,
    modules,
    registry_lookups_on_import,
)


def import_graph(
    source: Path = SOURCE, *, on_import_only: bool = True
) -> dict[str, dict[str, Import]]:
    """Each module → the modules its import runs (with `on_import_only=False`, also those its
    functions import when they run), each with the import statement that does."""
    imports = {
        module_name(path, source): imports_of(path, source, on_import_only=on_import_only)
        + (registry_lookups_on_import(path, source) if on_import_only else [])
        for path in modules(source)
    }
    graph: dict[str, dict[str, Import]] = {module: {} for module in imports}
    for importer, found in imports.items():
        own_packages = {importer.rsplit(".", depth)[0] for depth in range(importer.count(".") + 1)}
        for statement in found:
            parts = statement.imported.split(".")
            # `from llm_pipeline.tasks import get_task` names a package's attribute: the
            # module is the longest prefix that is one.
            target = next(
                ".".join(parts[:end])
                for end in range(len(parts), 0, -1)
                if ".".join(parts[:end]) in graph
            )
            packages = {".".join(parts[:end]) for end in range(1, target.count(".") + 1)}
            for module in {target} | (packages - own_packages):
                if module != importer:
                    graph[importer].setdefault(module, statement)
    return graph


def reachable(graph: dict[str, dict[str, Import]], start: str) -> set[str]:
    seen: set[str] = set()
    pending = [start]
    while pending:
        for module in graph[pending.pop()]:
            if module not in seen:
                seen.add(module)
                pending.append(module)
    return seen


def import_cycles(source: Path = SOURCE, *, on_import_only: bool = True) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted."""
    graph = import_graph(source, on_import_only=on_import_only)
    reach = {module: reachable(graph, module) for module in graph}
    cycles = {
        tuple(sorted(other for other in reach[module] if module in reach[other]))
        for module in graph
        if module in reach[module]
    }
    return sorted(list(cycle) for cycle in cycles)


def describe(cycle: list[str], graph: dict[str, dict[str, Import]]) -> str:
    edges = [
        f"  {importer} (line {statement.line}) imports {statement.imported}"
        + ("" if statement.imported == target else f", which runs {target}")
        for importer in cycle
        for target, statement in sorted(graph[importer].items())
        if target in cycle
    ]
    return f"{', '.join(cycle)}:\n" + "\n".join(edges)


def test_no_import_cycles():
    assert len(modules()) > 50, f"no modules found under {SOURCE}"
    cycles = import_cycles()
    graph = import_graph()
    assert not cycles, (
        "import cycles (move the names both sides need down into the module that should be "
        "lower, or import the higher one only under `if TYPE_CHECKING:`):\n"
        + "\n".join(describe(cycle, graph) for cycle in cycles)
    )


def test_no_cycles_through_deferred_imports():
    cycles = import_cycles(on_import_only=False)
    graph = import_graph(on_import_only=False)
    assert not cycles, (
        "modules that depend on each other through an import inside a function or under "
        "`if TYPE_CHECKING:` (move what both need into a lower module):\n"
        + "\n".join(describe(cycle, graph) for cycle in cycles)
    )


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / PACKAGE


def test_the_detector_finds_a_planted_cycle(tmp_path):
    source = write(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from llm_pipeline.b import x\n",
            "b.py": "try:\n    import llm_pipeline.a\nexcept ImportError:\n    pass\n",
            # Importing p.m runs p/__init__.py, which imports q: p and q are a cycle.
            "p/__init__.py": "from llm_pipeline import q\n",
            "p/m.py": "",
            "q.py": "from llm_pipeline.p.m import y\n",
            # Not cycles: an import in a function, one under TYPE_CHECKING, and a package
            # whose __init__.py imports a module that imports its sibling.
            "c.py": "def f():\n    from llm_pipeline import d\n",
            "d.py": (
                "from typing import TYPE_CHECKING\nimport llm_pipeline.c\n"
                "if TYPE_CHECKING:\n    from llm_pipeline.c import f\n"
            ),
            "s/__init__.py": "from llm_pipeline.s.one import z\n",
            "s/one.py": "from llm_pipeline.s.two import w\n",
            "s/two.py": "",
        },
    )
    assert import_cycles(source) == [
        ["llm_pipeline.a", "llm_pipeline.b"],
        ["llm_pipeline.p", "llm_pipeline.q"],
    ]
    message = describe(["llm_pipeline.p", "llm_pipeline.q"], import_graph(source))
    assert "llm_pipeline.q (line 1) imports llm_pipeline.p.m, which runs llm_pipeline.p" in message
    # Counting the imports functions make, and those under TYPE_CHECKING, c and d are one.
    assert ["llm_pipeline.c", "llm_pipeline.d"] in import_cycles(source, on_import_only=False)


def test_a_registry_lookup_while_importing_is_an_import_of_the_task_packages(tmp_path):
    registry = (
        "import importlib\n"
        'TASK_PACKAGES = {"one": "llm_pipeline.tasks.one"}\n'
        "TASKS = {}\n"
        "def get_task(name):\n"
        "    return importlib.import_module(TASK_PACKAGES[name]).TASK\n"
    )
    source = write(
        tmp_path,
        {
            "__init__.py": "",
            "tasks/__init__.py": registry,
            "tasks/one/__init__.py": "from llm_pipeline.tasks.one.task import TASK\n",
            "tasks/one/task.py": "from llm_pipeline.layer import helper\nTASK = 1\n",
            # Looks every task up while it is imported: importing task.py comes back to it.
            "layer.py": (
                "from llm_pipeline.tasks import TASKS\n"
                "METRICS = [t.metric for t in TASKS.values()]\n"
                "def helper():\n    pass\n"
            ),
            # Looks tasks up only when called: no import-time edge.
            "calm.py": (
                "from llm_pipeline.tasks import get_task\ndef f(name):\n    return get_task(name)\n"
            ),
        },
    )
    cycles = import_cycles(source)
    assert cycles == [
        ["llm_pipeline.layer", "llm_pipeline.tasks.one", "llm_pipeline.tasks.one.task"]
    ]
    message = describe(cycles[0], import_graph(source))
    assert "llm_pipeline.layer (line 2) imports llm_pipeline.tasks.one" in message
    graph = import_graph(source)
    assert "llm_pipeline.tasks.one" not in graph["llm_pipeline.calm"]
