"""What differs between tasks lives in their packages under `tasks/`; the layers ask the task
(docs/architecture.md, "## Tasks").

Three holds, from the strictest place out:
- the graph, the components, the steps and the CLI never name a task, its class, its model
  kind or its metrics, in code or in words (a docstring that says "summaries" misleads the
  reader of another task's run);
- no module outside `tasks/` picks a task or a model kind by its name (tests/task_names.py
  says what counts): such a branch is one the next task would have to copy, and since
  kinds are `ModelKind` objects a `kind == "classifier"` is silently False;
- no module outside `tasks/` imports a task's package: the layers reach a task through the
  registry (`llm_pipeline.tasks.get_task`, `TASKS`), which imports it on first use.
"""

import re
from pathlib import Path

import pytest

from llm_pipeline.tasks import TASK_PACKAGES, TASKS

from .module_imports import PACKAGE, SOURCE, imports_of
from .task_names import Vocabulary, findings, outside_tasks, vocabulary

ROOT = Path(__file__).resolve().parents[1]
#: Where no task may be named: the graph, the components, the steps and the command line.
TASK_FREE = [
    *sorted((SOURCE / "pipelines").glob("*.py")),
    *sorted((SOURCE / "components").glob("*.py")),
    *sorted((SOURCE / "steps").glob("*.py")),
    *sorted((SOURCE / "cli").glob("*.py")),
    ROOT / "pipeline.py",
]
#: The modules of tasks/ that any layer may import: the registry's face, the Task
#: interface, the model kinds and the chat rules (all at the bottom of the layers).
SHARED_TASK_MODULES = {f"{PACKAGE}.tasks.{name}" for name in ("base", "kinds", "chat")}
#: The top-level packages and modules outside tasks/, each checked on its own.
LAYER_NAMES = sorted(
    {path.relative_to(SOURCE).parts[0].removesuffix(".py") for path in outside_tasks(SOURCE)}
)


def task_words() -> dict[str, re.Pattern[str]]:
    """Each word that names something of one task, with the pattern that finds it."""
    words: dict[str, re.Pattern[str]] = {}
    for name, task in TASKS.items():
        for word in {name, name.replace("_", " "), name.replace("_", "-"), task.__name__}:
            words[word] = re.compile(rf"\b{re.escape(word)}\b", re.IGNORECASE)
        kind = task.model_kind.name
        words[kind] = re.compile(rf"\b{re.escape(kind)}\b", re.IGNORECASE)
        for metric in task.metric_names:
            words[metric] = re.compile(rf"\b{re.escape(metric)}\b")
    return words


def test_the_words_cover_every_task() -> None:
    words = task_words()
    assert {"summarization", "instruction_tuning", "instruction tuning"} <= set(words)
    assert {"seq2seq", "causal_lm", "rougeLsum", "exact_match"} <= set(words)


@pytest.mark.parametrize("path", TASK_FREE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_task_is_named(path: Path) -> None:
    words = task_words()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {word!r} in {line.strip()!r}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for word, pattern in words.items()
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


# --- no layer picks a task or a model kind by name -------------------------------------


@pytest.fixture(scope="module")
def words() -> Vocabulary:
    return vocabulary()


def test_the_vocabulary_is_the_registry(words: Vocabulary) -> None:
    assert words.tasks == set(TASK_PACKAGES)
    assert {"seq2seq", "causal_lm", "classifier"} <= words.kinds
    assert {"Summarization", "TextClassification"} <= words.classes
    assert {"SEQ2SEQ", "CAUSAL_LM", "CLASSIFIER"} <= words.constants


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ('if kind == "classifier":\n    pass\n', "compares"),
        ('x = "causal_lm" in kinds\n', "compares"),
        ('x = task.model_kind != "seq2seq"\n', "compares"),
        ('x = kind in ("seq2seq", "causal_lm")\n', "compares"),
        ('x = task.name == "summarization"\n', "compares"),
        ('x = kind.name == "seq2seq_lm"\n', "compares"),  # a misspelt name is still one
        ("x = type(task) is Summarization\n", "compares"),
        ('x = {"seq2seq": A}[k]\n', "a table keyed"),
        ('x = {"seq2seq": A, "causal_lm": B}.get(kind.name)\n', "a table keyed"),
        ("x = dict(classifier=A)\n", "a table keyed"),
        ('x = k in {"classifier"} or y\n', "compares"),
        ('KINDS = {"causal_lm", "classifier"}\n', "a set of"),
        ('match kind.name:\n    case "seq2seq":\n        pass\n', "matches"),
        ("match task:\n    case TextClassification():\n        pass\n", "matches a task class"),
        ("x = isinstance(task, (Summarization, Other))\n", "tests for a task class"),
        ("x = issubclass(cls, tasks.TextClassification)\n", "tests for a task class"),
        ('x = get_task("text_classification")\n', "names a task"),
        ('x = MODEL_KINDS["causal_lm"]\n', "names a task"),
        ('def f(kind="seq2seq"):\n    pass\n', "names a task"),
        ("from llm_pipeline.tasks.kinds import CLASSIFIER\nx = k is CLASSIFIER\n", "compares"),
        ("from ..tasks import SEQ2SEQ as S\nx = k == S\n", "compares"),
        ("from llm_pipeline.tasks import kinds\nx = k in (kinds.CAUSAL_LM,)\n", "compares"),
        ("import llm_pipeline.tasks.kinds as K\nx = {K.SEQ2SEQ: 1}\n", "a table"),
    ],
)
def test_the_detector_finds_a_name_picked(words: Vocabulary, source: str, what: str) -> None:
    found = findings(source, words)
    assert found, f"nothing found in {source!r}"
    assert any(f.what.startswith(what) for f in found), [f.what for f in found]


def test_the_detector_finds_a_kind_constant_compared_not_one_built_with(
    words: Vocabulary,
) -> None:
    source = (
        "from llm_pipeline.tasks.kinds import CAUSAL_LM, CLASSIFIER\n"
        "\n"
        "def head(kind):\n"
        "    return kind is CLASSIFIER\n"
        "\n"
        "def shape(config):\n"
        "    return model_shape(config, kind=CAUSAL_LM)\n"
        "\n"
        "def table(kind):\n"
        "    return {kinds.SEQ2SEQ: 1}[kind]\n"
    )
    found = findings(source, words)
    assert [(f.line, f.code) for f in found] == [
        (4, "kind is CLASSIFIER"),
        (10, "{kinds.SEQ2SEQ: 1}"),
    ]


@pytest.mark.parametrize(
    "source",
    [
        "if kind.generates:\n    pass\n",
        "x = task.model_kind.auto_class\n",
        "x = MODEL_KINDS[name]\n",
        "x = get_task(config.task)\n",
        "x = recorded == task.name\n",  # the same task as a saved model's: no name picked
        'x = path.name == "__init__.py"\n',
        "x = peft.TaskType.CAUSAL_LM\n",  # PEFT's enum, not a ModelKind
        "x = isinstance(task, Task)\n",
        '"""A docstring may say summarization and seq2seq."""\n',
        'def f():\n    """Trains a classifier."""\n',
        'raise ValueError(f"task {name!r} trains a classifier, not a seq2seq model")\n',
        'x = "a seq2seq model"\n',
        'x = {"prompt": 1, "response": 2}\n',
    ],
)
def test_the_detector_passes_what_asks_the_task(words: Vocabulary, source: str) -> None:
    assert findings(source, words) == []


def test_a_finding_names_its_file_line_and_code(words: Vocabulary) -> None:
    source = 'import x\n\n\ndef f(shape):\n    return shape.kind == "causal_lm" and x\n'
    (found,) = findings(source, words)
    assert found.describe("src/llm_pipeline/fit/places.py") == (
        "src/llm_pipeline/fit/places.py:5: compares a task or model kind by name: "
        'shape.kind == "causal_lm"'
    )


@pytest.mark.parametrize("layer", LAYER_NAMES)
def test_no_layer_picks_a_task_or_kind_by_name(words: Vocabulary, layer: str) -> None:
    """Every module outside tasks/, package by package: read a `ModelKind` field or call a
    `Task` hook instead (docs/architecture.md, "## Tasks")."""
    found = [
        finding.describe(str(path.relative_to(ROOT)))
        for path in outside_tasks(SOURCE)
        if path.relative_to(SOURCE).parts[0].removesuffix(".py") == layer
        for finding in findings(path.read_text(encoding="utf-8"), words, str(path))
    ]
    assert not found, f"{len(found)} in {layer}:\n" + "\n".join(found)


def test_every_module_outside_tasks_is_checked() -> None:
    checked = list(outside_tasks(SOURCE))
    assert len(checked) > 100
    assert SOURCE / "fit" / "places.py" in checked
    assert not [path for path in checked if path.relative_to(SOURCE).parts[0] == "tasks"]


# --- no layer imports a task's package --------------------------------------------------


def task_package_imports(source: Path = SOURCE) -> list[str]:
    """Each import of a task's own modules (anything under tasks/ but the shared ones)
    by a module outside tasks/, as `path:line: importer imports imported`."""
    tasks = source / "tasks"
    found = []
    for path in outside_tasks(source):
        for statement in imports_of(path, source):
            parts = statement.imported.split(".")
            if parts[:2] != [PACKAGE, "tasks"] or len(parts) < 3:
                continue
            module = ".".join(parts[:3])
            if module in SHARED_TASK_MODULES:
                continue
            if not ((tasks / parts[2]).is_dir() or (tasks / f"{parts[2]}.py").is_file()):
                continue  # `from llm_pipeline.tasks import get_task`: the registry's name
            where = path.relative_to(source.parents[1])
            found.append(f"{where}:{statement.line}: imports {statement.imported}")
    return found


def test_no_layer_imports_a_task_package() -> None:
    found = task_package_imports()
    assert not found, (
        "modules outside tasks/ that import a task's package (ask the registry: "
        "`llm_pipeline.tasks.get_task(name)` or a `Task` passed in):\n" + "\n".join(found)
    )


def test_the_import_check_finds_a_task_package_imported(tmp_path: Path) -> None:
    source = tmp_path / "src" / PACKAGE
    files = {
        "__init__.py": "",
        "tasks/__init__.py": "",
        "tasks/base.py": "",
        "tasks/kinds.py": "",
        "tasks/summarization/__init__.py": "",
        "tasks/summarization/task.py": "",
        "tasks/text_classification/__init__.py": "",
        "data/__init__.py": "",
        "data/fine.py": (
            "from llm_pipeline.tasks import get_task\n"
            "from llm_pipeline.tasks.kinds import ModelKind\n"
            "from llm_pipeline.tasks.base import Task\n"
        ),
        "data/leaks.py": (
            "from llm_pipeline.tasks.summarization.task import Summarization\n"
            "def f():\n"
            "    from llm_pipeline.tasks import text_classification\n"
            "    return importlib.import_module('llm_pipeline.tasks.summarization')\n"
        ),
    }
    for name, text in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text(text, encoding="utf-8")
    assert task_package_imports(source) == [
        "src/llm_pipeline/data/leaks.py:1: imports llm_pipeline.tasks.summarization.task",
        "src/llm_pipeline/data/leaks.py:3: imports llm_pipeline.tasks.text_classification",
        "src/llm_pipeline/data/leaks.py:4: imports llm_pipeline.tasks.summarization",
    ]
