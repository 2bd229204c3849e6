"""Imports point down the layers of docs/architecture.md ("## Layers"), never up.

The layer order is written down here and only here. Every module under src/llm_pipeline is
parsed (not imported) and each of its imports is checked, including those inside functions
and `if TYPE_CHECKING:` blocks: a lazy import upwards is still a dependency upwards.

The task packages (`tasks/<task>/`, those the registry lists in TASK_PACKAGES) are a layer of
their own, above the shared layers they call and below the steps; the rest of `tasks/` (the
registry, the Task interface, the model kinds, the chat rules) is at the bottom. The registry
imports a task's package by its dotted name when first asked (`importlib`), which is the one
way down-to-up the design allows and is not a static import: a bottom module that imported
a task package by a written import would be caught here.
"""

from pathlib import Path

import pytest

from llm_pipeline.tasks import TASK_PACKAGES

from .module_imports import PACKAGE, SOURCE, imports_of, module_name, modules

#: The task packages, as names under llm_pipeline: `tasks.summarization`, ...
TASK_LAYER = {package.removeprefix(f"{PACKAGE}.") for package in TASK_PACKAGES.values()}

#: From the top. Each set holds top-level names under llm_pipeline (subpackages and
#: modules; "__init__" is the package's own __init__.py). A module may import from its
#: own layer or any layer below it. pipeline.py, outside the package, is above them all.
LAYERS: list[set[str]] = [
    {"cli"},
    {"local", "vertex", "pipelines", "bundle"},
    {"components"},
    {"steps"},
    TASK_LAYER,
    {"registry", "serve", "evaluation", "train", "data", "fit"},
    {"launch"},
    {"models", "engines"},
    {"config"},
    {
        "storage",
        "safe_paths",
        "errors",
        "tasks",
        "output_files",
        "progress",
        "lockfile",
        "caches",
        "__init__",
    },
]


def top_name(module: str) -> str:
    """The name under llm_pipeline that places `module` in a layer: the top-level package or
    module, but for a package under tasks/ (a task's), `tasks.<its name>`."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "tasks" and (SOURCE / "tasks" / parts[2]).is_dir():
        return f"tasks.{parts[2]}"
    return parts[1] if len(parts) > 1 else "__init__"


def exists(name: str) -> bool:
    """Whether a name of LAYERS (`train`, `errors`, `tasks.summarization`) is in the source."""
    path = SOURCE.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def layer_of(module: str) -> int | None:
    name = top_name(module)
    if not exists(name):
        name = "__init__"  # `from llm_pipeline import __version__`: the package itself
    return next((index for index, layer in enumerate(LAYERS) if name in layer), None)


def layer_label(index: int) -> str:
    return f"layer {index + 1} of {len(LAYERS)} ({', '.join(sorted(LAYERS[index]))})"


def test_the_package_has_modules():
    assert len(modules()) > 50, f"no modules found under {SOURCE}"


def test_every_module_belongs_to_a_layer():
    unplaced = sorted(
        {top_name(module_name(path)) for path in modules()}
        - {name for layer in LAYERS for name in layer}
    )
    assert not unplaced, (
        f"in no layer: {', '.join(unplaced)} (under src/{PACKAGE}); add each to LAYERS in "
        f"tests/{Path(__file__).name} where docs/architecture.md's '## Layers' puts it (a task "
        "package: add it to llm_pipeline.tasks.TASK_PACKAGES)"
    )


def test_every_layer_name_exists():
    missing = sorted(name for layer in LAYERS for name in layer if not exists(name))
    assert not missing, f"LAYERS names {', '.join(missing)}, which src/{PACKAGE} lacks"


def test_imports_point_down():
    upward = []
    for path in modules():
        for found in imports_of(path):
            own, target = layer_of(found.importer), layer_of(found.imported)
            if own is None or target is None or target >= own:
                continue
            upward.append(
                f"{found.importer} (line {found.line}), in {layer_label(own)}, imports "
                f"{found.imported}, in the higher {layer_label(target)}"
            )
    assert not upward, (
        "imports that point up the layers (move the shared name down into the lowest layer "
        "that needs it):\n" + "\n".join(upward)
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from llm_pipeline.train.worker import run", "llm_pipeline.train.worker"),
        ("from llm_pipeline.steps import reporting", "llm_pipeline.steps.reporting"),
        ("import llm_pipeline.local.run_pipeline", "llm_pipeline.local.run_pipeline"),
        ("def f():\n    from ..train import worker", "llm_pipeline.train.worker"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from llm_pipeline.steps.reporting import X",
            "llm_pipeline.steps.reporting",
        ),
        ("importlib.import_module('llm_pipeline.cli')", "llm_pipeline.cli"),
    ],
)
def test_the_parser_sees_every_kind_of_import(tmp_path, source, expected):
    # A module placed as llm_pipeline/models/probe.py, parsed like the real ones.
    fake = tmp_path / PACKAGE / "models" / "probe.py"
    for package in ("models", "train", "steps", "local"):
        (tmp_path / PACKAGE / package).mkdir(parents=True)
        (tmp_path / PACKAGE / package / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / PACKAGE / "cli").mkdir()
    (tmp_path / PACKAGE / "cli" / "__init__.py").write_text("", encoding="utf-8")
    fake.write_text(source + "\n", encoding="utf-8")
    (found,) = imports_of(fake, tmp_path / PACKAGE)
    assert (found.importer, found.imported) == ("llm_pipeline.models.probe", expected)
    assert layer_of(found.imported) < layer_of(found.importer)  # type: ignore[operator]


def test_each_task_package_is_a_layer_between_the_steps_and_what_it_calls():
    steps, shared = layer_of("llm_pipeline.steps"), layer_of("llm_pipeline.data")
    bottom = layer_of("llm_pipeline.tasks")
    assert TASK_LAYER, "TASK_PACKAGES lists no task"
    for package in TASK_PACKAGES.values():
        assert exists(top_name(package)), f"TASK_PACKAGES names {package}, which is not there"
        task = layer_of(f"{package}.task")
        assert steps is not None and shared is not None and bottom is not None
        assert task is not None and steps < task < shared < bottom, package
    # The registry, the interface, the kinds and the chat rules stay at the bottom.
    for module in ("llm_pipeline.tasks", "tasks.base", "tasks.kinds", "tasks.chat"):
        name = module if module.startswith(PACKAGE) else f"{PACKAGE}.{module}"
        assert layer_of(name) == bottom, name
    # `from llm_pipeline.tasks import get_task` names the registry, not a task package.
    assert layer_of("llm_pipeline.tasks.get_task") == bottom


@pytest.mark.parametrize(
    ("importer", "imported", "upward"),
    [
        ("llm_pipeline.tasks.summarization.task", "llm_pipeline.evaluation.rouge", False),
        (
            "llm_pipeline.tasks.text_classification.scoring",
            "llm_pipeline.tasks.text_classification.labels",
            False,
        ),
        ("llm_pipeline.tasks.summarization.task", "llm_pipeline.tasks.base", False),
        ("llm_pipeline.steps.evaluate", "llm_pipeline.tasks.summarization", False),
        ("llm_pipeline.evaluation.scoring", "llm_pipeline.tasks.summarization.task", True),
        ("llm_pipeline.tasks.base", "llm_pipeline.tasks.text_classification", True),
        ("llm_pipeline.tasks.summarization.task", "llm_pipeline.steps.evaluate", True),
    ],
)
def test_a_task_package_may_call_down_but_is_not_called_from_below(importer, imported, upward):
    assert (layer_of(imported) < layer_of(importer)) is upward  # type: ignore[operator]
