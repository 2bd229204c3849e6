"""Imports point down the layers of DESIGN.md ("## Layers"), never up.

The layer order is written down here and only here. Every module under src/llm_pipeline is
parsed (not imported) and each of its imports is checked, including those inside functions
and `if TYPE_CHECKING:` blocks: a lazy import upwards is still a dependency upwards.
"""

from pathlib import Path

import pytest

from .module_imports import PACKAGE, SOURCE, imports_of, module_name, modules

#: From the top. Each set holds top-level names under llm_pipeline (subpackages and
#: modules; "__init__" is the package's own __init__.py). A module may import from its
#: own layer or any layer below it. pipeline.py, outside the package, is above them all.
LAYERS: list[set[str]] = [
    {"cli"},
    {"local", "vertex", "pipelines", "bundle"},
    {"components"},
    {"steps"},
    {"registry", "serve", "evaluation", "train", "data", "fit"},
    {"launch"},
    {"models"},
    {"config"},
    {
        "storage",
        "safe_paths",
        "errors",
        "tasks",
        "output_files",
        "progress",
        "lockfile",
        "__init__",
    },
]


def top_name(module: str) -> str:
    """The name under llm_pipeline that places `module` in a layer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of(module: str) -> int | None:
    name = top_name(module)
    if not ((SOURCE / name).is_dir() or (SOURCE / f"{name}.py").is_file()):
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
        f"tests/{Path(__file__).name} where DESIGN.md's '## Layers' puts it"
    )


def test_every_layer_name_exists():
    missing = sorted(
        name
        for layer in LAYERS
        for name in layer
        if not ((SOURCE / name).is_dir() or (SOURCE / f"{name}.py").is_file())
    )
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
