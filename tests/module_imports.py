"""llm_pipeline's imports as its source states them: parsed, never imported.

Shared by tests/test_layers.py (every import, wherever it sits: a lazy import upwards is still
a dependency upwards) and tests/test_import_cycles.py (only the imports that run when a module
is imported, which are the ones a cycle among can break an import).
"""

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "llm_pipeline"
SOURCE = Path(__file__).resolve().parents[1] / "src" / PACKAGE


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name, e.g. llm_pipeline.models.loading
    imported: str  # dotted module name as written (resolved when relative)
    line: int


def module_name(path: Path, source: Path = SOURCE) -> str:
    parts = path.relative_to(source.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def is_package(module: str, source: Path = SOURCE) -> bool:
    return (source.parent / module.replace(".", "/") / "__init__.py").is_file()


def modules(source: Path = SOURCE) -> list[Path]:
    return sorted(source.rglob("*.py"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def executed_on_import(tree: ast.Module) -> Iterator[ast.AST]:
    """The nodes Python runs while it imports the module: the top level, into its `if`,
    `try` and class bodies, but not a function's body (it runs when called) nor the body of
    `if TYPE_CHECKING:` (never run)."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            # Decorators and default values run where the function is defined.
            decorators = [] if isinstance(node, ast.Lambda) else node.decorator_list
            defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]
            pending += [*decorators, *defaults]
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            pending += node.orelse
        else:
            pending += ast.iter_child_nodes(node)


def imports_of(path: Path, source: Path = SOURCE, *, on_import_only: bool = False) -> list[Import]:
    """Every import of an llm_pipeline module in `path`, wherever in the file it sits; with
    `on_import_only`, only those that run when the module is imported."""
    importer = module_name(path, source)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []
    for node in executed_on_import(tree) if on_import_only else ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from llm_pipeline.x import y` imports submodule x.y when y is one.
            names = [
                f"{base}.{alias.name}" if is_package(base, source) else base for alias in node.names
            ]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        else:
            continue
        found += [
            Import(importer, name, node.lineno)
            for name in names
            if name == PACKAGE or name.startswith(f"{PACKAGE}.")
        ]
    return found


#: The registry's lookups that import a task's package (`llm_pipeline.tasks`): reading a
#: task class by name, or all of them. Iterating the names, `len` and `in` import nothing.
REGISTRY_LOOKUPS = {"get_task"}
REGISTRY_MAPPING = "TASKS"
IMPORTING_METHODS = {"values", "items", "get"}


def task_packages(source: Path = SOURCE) -> list[str]:
    """The task packages the registry imports by name (`TASK_PACKAGES` in tasks/__init__.py,
    read as written); none for a tree whose registry has no such table."""
    registry = source / "tasks" / "__init__.py"
    if not registry.is_file():
        return []
    for node in ast.parse(registry.read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        named = isinstance(target, ast.Name) and target.id == "TASK_PACKAGES"
        if named and isinstance(value, ast.Dict):
            return [v.value for v in value.values if isinstance(v, ast.Constant)]
    return []


def _is_lookup(node: ast.AST) -> bool:
    if isinstance(node, ast.Call):
        function = node.func
        if getattr(function, "id", getattr(function, "attr", None)) in REGISTRY_LOOKUPS:
            return True
        return (
            isinstance(function, ast.Attribute)
            and function.attr in IMPORTING_METHODS
            and getattr(function.value, "id", getattr(function.value, "attr", None))
            == REGISTRY_MAPPING
        )
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and getattr(node.value, "id", getattr(node.value, "attr", None)) == REGISTRY_MAPPING
    )


def registry_lookups_on_import(path: Path, source: Path = SOURCE) -> list[Import]:
    """The task packages `path` imports through the registry while it is itself being
    imported (a module-level `TASKS.values()`, `get_task(...)`): the registry imports them
    by name (importlib), which no written import shows, so each is returned as an import
    of every task package, at the line of the lookup."""
    importer = module_name(path, source)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lookups = [node for node in executed_on_import(tree) if _is_lookup(node)]
    first = min((getattr(node, "lineno", 0) for node in lookups), default=None)
    if first is None:
        return []
    return [Import(importer, package, first) for package in task_packages(source)]
