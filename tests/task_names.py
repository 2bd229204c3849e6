"""Where code outside `tasks/` picks a task or a model kind by its name: parsed, never imported.

A layer that asks `kind == "classifier"` has grown a branch the next task must copy, and
since kinds became `ModelKind` objects such a comparison is also silently False. What a
layer may do instead is read a fact of the kind (`kind.generates`) or call a hook of the
task (docs/architecture.md, "## Tasks"). Shared by tests/test_task_seam.py, which holds
the tree to none, and benchmarks/codebase_shape.py, which counts them on two revisions.

A finding is a string constant that is exactly a task's or a kind's name, in code (not a
docstring, not the text of an f-string): compared (`==`, `!=`, `in`, `is`, ...), a `match`
case, a dict key or set element (a lookup table by name), a subscript (`MODEL_KINDS["seq2seq"]`)
or an argument (`get_task("summarization")`); a `task.name` / `kind.name` compared with
text; a task class in `isinstance`/`issubclass` or a comparison; and a `ModelKind` constant
(`SEQ2SEQ`, `kinds.CLASSIFIER`) compared, matched or keyed on. Shared machinery of one kind
may still name the kind it builds (`models/decoder_only.py` makes `CAUSAL_LM` models): that
picks nothing.
"""

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Vocabulary:
    """The names a layer must not pick a task or a kind by."""

    #: The names configs use for tasks (`summarization`).
    tasks: frozenset[str]
    #: The names of the model kinds (`seq2seq`).
    kinds: frozenset[str]
    #: The task classes (`Summarization`).
    classes: frozenset[str]
    #: The module constants that hold the ModelKind instances (`SEQ2SEQ`).
    constants: frozenset[str]

    @property
    def names(self) -> frozenset[str]:
        return self.tasks | self.kinds


def vocabulary() -> Vocabulary:
    """The vocabulary of the registry on the import path (llm_pipeline.tasks)."""
    from llm_pipeline.tasks import MODEL_KINDS, TASK_PACKAGES, TASKS, ModelKind, kinds

    return Vocabulary(
        tasks=frozenset(TASK_PACKAGES),
        kinds=frozenset(MODEL_KINDS),
        classes=frozenset(TASKS[name].__name__ for name in TASK_PACKAGES),
        constants=frozenset(
            name for name, value in vars(kinds).items() if isinstance(value, ModelKind)
        ),
    )


@dataclass(frozen=True)
class Finding:
    line: int
    what: str
    code: str

    def describe(self, where: str) -> str:
        return f"{where}:{self.line}: {self.what}: {self.code}"


#: A `.name` read on one of these is a task's or a kind's name.
_NAMED_OWNERS = ("task", "kind")
#: Where the ModelKind constants are defined (and re-exported).
_KIND_MODULES = {"llm_pipeline.tasks", "llm_pipeline.tasks.kinds"}


def _tail(node: ast.expr) -> str | None:
    """The last identifier of a name or an attribute chain: `self.task` → `task`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_name_read(node: ast.expr) -> bool:
    """`task.name`, `kind.name`, `self.task.model_kind.name`: a task's or a kind's name."""
    if not (isinstance(node, ast.Attribute) and node.attr == "name"):
        return False
    owner = (_tail(node.value) or "").lower()
    return any(word in owner for word in _NAMED_OWNERS)


def _texts(node: ast.expr) -> list[str]:
    """The string constants `node` is, or holds as a tuple, list or set literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [text for item in node.elts for text in _texts(item)]
    return []


class _Detector(ast.NodeVisitor):
    def __init__(self, source: str, words: Vocabulary) -> None:
        self.source = source
        self.words = words
        self.found: list[Finding] = []
        self.kind_aliases: set[str] = set()  # local names bound to a ModelKind constant
        self.kind_modules: set[str] = set()  # local names bound to tasks / tasks.kinds
        self.reported: set[int] = set()  # ids of nodes already inside a finding

    def add(self, node: ast.AST, what: str) -> None:
        segment = ast.get_source_segment(self.source, node) or ast.dump(node)
        line = getattr(node, "lineno", 0)
        self.found.append(Finding(line, what, " ".join(segment.split())))
        self.reported.update(id(inner) for inner in ast.walk(node))

    # --- the ModelKind constants by name --------------------------------------------------

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module in _KIND_MODULES or (node.level and module in {"tasks", "tasks.kinds", "kinds"}):
            for alias in node.names:
                if alias.name in self.words.constants:
                    self.kind_aliases.add(alias.asname or alias.name)
                elif alias.name == "kinds":
                    self.kind_modules.add(alias.asname or alias.name)
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in _KIND_MODULES and alias.asname:
                self.kind_modules.add(alias.asname)
        self.generic_visit(node)

    def _is_kind_constant(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.kind_aliases
        if isinstance(node, ast.Attribute) and node.attr in self.words.constants:
            owner = ast.unparse(node.value)
            return owner in self.kind_modules or owner.endswith(("tasks", "kinds"))
        return False

    # --- comparisons and match --------------------------------------------------------

    def _picks_by_name(self, operands: list[ast.expr]) -> bool:
        names = [text for operand in operands for text in _texts(operand)]
        if any(text in self.words.names for text in names):
            return True
        if any(_tail(o) in self.words.classes for o in operands):
            return True
        members = [
            member
            for operand in operands
            for member in (
                operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
            )
        ]
        if any(self._is_kind_constant(member) for member in members):
            return True
        # `kind.name == "seq2seq_lm"`: a name read compared with text, even a misspelt one.
        return bool(names) and any(_is_name_read(o) for o in operands)

    def visit_Compare(self, node: ast.Compare) -> None:
        if self._picks_by_name([node.left, *node.comparators]):
            self.add(node, "compares a task or model kind by name")
            return
        self.generic_visit(node)

    def visit_match_case(self, node: ast.match_case) -> None:
        for pattern in ast.walk(node.pattern):
            if isinstance(pattern, ast.MatchValue) and self._picks_by_name([pattern.value]):
                self.add(pattern, "matches a task or model kind by name")
            elif isinstance(pattern, ast.MatchClass) and _tail(pattern.cls) in self.words.classes:
                self.add(pattern, "matches a task class")
        self.generic_visit(node)

    # --- lookup tables and lookups by name --------------------------------------------

    def visit_Dict(self, node: ast.Dict) -> None:
        keys = [key for key in node.keys if key is not None]
        if any(text in self.words.names for key in keys for text in _texts(key)) or any(
            self._is_kind_constant(key) for key in keys
        ):
            self.add(node, "a table keyed by task or model-kind names")
            return
        self.generic_visit(node)

    def visit_Set(self, node: ast.Set) -> None:
        if any(text in self.words.names for text in _texts(node)):
            self.add(node, "a set of task or model-kind names")
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        function = _tail(node.func)
        if function in {"isinstance", "issubclass"} and len(node.args) == 2:
            classes = node.args[1]
            members = classes.elts if isinstance(classes, ast.Tuple) else [classes]
            if any(_tail(member) in self.words.classes for member in members):
                self.add(node, "tests for a task class")
                return
        if function == "dict" and any(k.arg in self.words.names for k in node.keywords):
            self.add(node, "a table keyed by task or model-kind names")
            return
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant):
            return  # a docstring, or a string statement: words, not code
        self.generic_visit(node)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        # The literal parts of an f-string are message text; the placeholders are code.
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                self.visit(value)

    def visit_Constant(self, node: ast.Constant) -> None:
        if id(node) not in self.reported and node.value in self.words.names:
            self.add(node, "names a task or model kind")


def findings(source: str, words: Vocabulary, filename: str = "<source>") -> list[Finding]:
    """Every place in `source` that picks a task or a model kind by name, by line."""
    detector = _Detector(source, words)
    detector.visit(ast.parse(source, filename=filename))
    return sorted(detector.found, key=lambda found: (found.line, found.what))


def outside_tasks(package: Path) -> Iterator[Path]:
    """The modules of `package` (src/llm_pipeline) outside its tasks/ folder."""
    for path in sorted(package.rglob("*.py")):
        if "tasks" not in path.relative_to(package).parts[:1]:
            yield path


def tree_findings(package: Path, words: Vocabulary) -> list[str]:
    """Each finding under `package` outside tasks/, as `path:line: what: code`."""
    root = package.parents[1]
    return [
        found.describe(str(path.relative_to(root)))
        for path in outside_tasks(package)
        for found in findings(path.read_text(encoding="utf-8"), words, str(path))
    ]
