"""docs/architecture.md names functions where they are: a rename that forgets the page fails.

The page writes a reference as `path.py::name` (or `path.py::Class.method`), with the path
under src/llm_pipeline/ or, for pipeline.py, at the repository root. Each file is parsed with
`ast`, not imported (torch, DeepSpeed and KFP would take seconds), and the name must be
defined in it: a module-level function, class or assignment, not an import, so the page points
at the definition. Bare `path.py` mentions and `llm_pipeline.x.y` module names must exist too.
"""

import ast
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "src" / "llm_pipeline"
PAGE = REPO / "docs" / "architecture.md"

CODE_SPAN = re.compile(r"`([^`\n]+)`")
REFERENCE = re.compile(r"^([\w/]+\.py)::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")
FILE = re.compile(r"^[\w/]+\.py$")
MODULE = re.compile(r"\bllm_pipeline(?:\.\w+)+")


def code_spans(text: str) -> list[str]:
    return CODE_SPAN.findall(text)


def references(text: str) -> list[tuple[str, str]]:
    """Every `path.py::name` in the page's code spans, in order, as (path, dotted name)."""
    found = []
    for span in code_spans(text):
        match = REFERENCE.match(span)
        if match:
            found.append((match.group(1), match.group(2)))
    return found


def source_file(path: str) -> Path | None:
    """`path` under src/llm_pipeline/, else at the repository root; None if neither has it."""
    for base in (SOURCE, REPO):
        candidate = base / path
        if candidate.is_file():
            return candidate
    return None


@cache
def parsed(file: Path) -> ast.Module:
    return ast.parse(file.read_text(encoding="utf-8"), filename=str(file))


def defined_names(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """Functions, classes and assigned names a module or class body defines (not imports)."""
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
    return names


def problem(path: str, dotted: str) -> str | None:
    """Why `path.py::dotted` is not where the page says, or None if it is."""
    file = source_file(path)
    if file is None:
        return f"{path}: no such file under src/llm_pipeline/ or the repository root"
    body: list[ast.stmt] = parsed(file).body
    where = path
    for part in dotted.split("."):
        node = defined_names(body).get(part)
        if node is None:
            return f"{path}::{dotted}: {where} defines no {part!r}"
        body = node.body if isinstance(node, ast.ClassDef) else []
        where = f"{where}::{part}"
    return None


def module_problem(module: str) -> str | None:
    """Why the dotted module name `module` (llm_pipeline.x.y) names no module, or None."""
    relative = Path(*module.split(".")[1:])
    folder = SOURCE / relative
    if folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file():
        return None
    return f"{module}: no module src/llm_pipeline/{relative}.py or package {relative}/"


def test_the_page_names_enough_to_follow() -> None:
    """The reference pattern finds the page's hops (a changed notation would find none)."""
    found = references(PAGE.read_text(encoding="utf-8"))
    assert len(found) >= 60, f"only {len(found)} `path.py::name` references in {PAGE}"
    assert ("train/worker.py", "run") in found


@pytest.mark.parametrize(
    ("path", "name"), sorted(set(references(PAGE.read_text(encoding="utf-8")))), ids=str
)
def test_each_named_function_is_where_the_page_says(path: str, name: str) -> None:
    assert problem(path, name) is None, problem(path, name)


def test_each_file_and_module_the_page_mentions_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    problems = []
    for span in code_spans(text):
        if FILE.match(span) and source_file(span) is None:
            problems.append(f"{span}: no such file under src/llm_pipeline/ or the repository root")
        problems += [p for m in MODULE.findall(span) if (p := module_problem(m))]
    assert not problems, "docs/architecture.md:\n" + "\n".join(problems)


def test_a_renamed_function_is_caught() -> None:
    """The check itself: names that are not defined, or only imported, are reported."""
    assert problem("train/worker.py", "run") is None
    assert problem("train/worker.py", "run_renamed") is not None
    # worker.py imports write_result from train/outputs.py; the page must point there.
    assert problem("train/worker.py", "write_result") is not None
    assert problem("train/spec.py", "WorkerSpec.write") is None
    assert problem("train/spec.py", "WorkerSpec.missing") is not None
    assert problem("train/nowhere.py", "run") is not None
    assert problem("pipeline.py", "main") is not None  # imported there, defined in cli/
    assert module_problem("llm_pipeline.train.worker") is None
    assert module_problem("llm_pipeline.train.nowhere") is not None


def test_readme_links_the_page() -> None:
    assert "docs/architecture.md" in (REPO / "README.md").read_text(encoding="utf-8")


def layout_packages(text: str) -> set[str]:
    """The packages the page's layout tree draws, as paths under src/llm_pipeline/."""
    block = text.split("```text\n", 1)[1].split("```", 1)[0]
    found: set[str] = set()
    parents: list[str] = []
    for line in block.splitlines():
        match = re.match(r"^([│ ]*)[├└]── (\w+)/", line)
        if not match:
            continue
        depth = len(match.group(1)) // 4
        parents = [*parents[:depth], match.group(2)]
        found.add("/".join(parents))
    return found


def source_packages() -> set[str]:
    return {
        str(init.parent.relative_to(SOURCE))
        for init in SOURCE.rglob("__init__.py")
        if init.parent != SOURCE and "__pycache__" not in init.parts
    }


def test_the_layout_tree_is_the_source_tree():
    drawn = layout_packages(PAGE.read_text(encoding="utf-8"))
    assert drawn, "no layout tree (a ```text block of ├── lines) in docs/architecture.md"
    missing = sorted(source_packages() - drawn)
    stale = sorted(drawn - source_packages())
    assert not missing, f"packages the layout in {PAGE.name} does not draw: {missing}"
    assert not stale, f"packages the layout in {PAGE.name} draws that do not exist: {stale}"
