"""One command tree: `pipeline.py --help` names every subcommand, and every example that a
`--help` shows parses, with configs and endpoint names that the repository has."""

from __future__ import annotations

import argparse
import importlib
import itertools
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_pipeline import cli
from llm_pipeline.cli import registry as cli_registry
from llm_pipeline.cli import run as cli_run
from llm_pipeline.cli import serve as cli_serve
from llm_pipeline.cli import vertex as cli_vertex
from llm_pipeline.config import load_config
from llm_pipeline.registry.local.registry import LocalRegistry
from llm_pipeline.vertex import submit as vertex_submit

from .pipeline_cli import REPO, run_pipeline

EXAMPLE_ENDPOINT = cli_registry.EXAMPLE_ENDPOINT

#: `pipeline.py`'s subcommands; one that is dispatched another way is missing from `--help`.
SUBCOMMANDS = {"run", "registry", "rollback", "serve", "schedules", "clean"}
#: The commands run with `python -m`, each a module under llm_pipeline/cli/.
MODULE_COMMANDS = ("serve", "container", "image_check", "docs")


def parsers_of(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """`parser` and, under it, every subcommand's parser."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from parsers_of(sub)


def examples(epilog: str | None) -> list[list[str]]:
    """The commands of an epilog's examples (`  python ...`, `\\` joining lines), split."""
    commands, pending = [], ""
    for line in (epilog or "").splitlines():
        if pending or re.match(r"  python3? ", line):
            pending += line.strip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            commands.append(shlex.split(pending))
            pending = ""
    return commands


def all_examples() -> list[tuple[str, list[str]]]:
    """Every example of every parser: `pipeline.py`'s and the `python -m` commands'."""
    found = [
        (sub.prog, command)
        for sub in parsers_of(cli.build_parser())
        for command in examples(sub.epilog)
    ]
    for name in MODULE_COMMANDS:
        module = importlib.import_module(f"llm_pipeline.cli.{name}")
        for sub in parsers_of(module.build_parser()):
            found += [(sub.prog, command) for command in examples(sub.epilog)]
    return found


def parse_example(command: list[str]) -> argparse.Namespace:
    """Parse an example as its program would; SystemExit where argparse refuses it."""
    if command[:2] == ["python", "pipeline.py"]:
        parser = cli.build_parser()
        return parser.parse_args(cli.with_command(command[2:]))
    assert command[0] in ("python", "python3") and command[1] == "-m", command
    module = importlib.import_module(command[2])
    return module.build_parser().parse_args(command[3:])


def test_help_names_every_subcommand() -> None:
    result = run_pipeline("--help")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("    ")}
    assert set(cli.subcommands(cli.build_parser())) == SUBCOMMANDS
    assert listed >= SUBCOMMANDS, result.stdout


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_subcommand_has_help_with_examples(name: str) -> None:
    parser = cli.subcommands(cli.build_parser())[name]
    commands = examples(parser.epilog)
    assert commands, f"`pipeline.py {name} --help` shows no examples"
    for command in commands:  # each example runs this subcommand (a run's may leave it out)
        first = command[2] if len(command) > 2 else ""
        assert first == name or (name == "run" and first.startswith("-")), command


def test_examples_are_found() -> None:
    found = all_examples()
    assert len(found) > 20
    assert ["python", "pipeline.py", "--config", "configs/local.json"] in [c for _, c in found]


class Reached(Exception):
    """An example got past every check to the action it asks for (a run, a server, a call
    to Vertex AI), which other tests run for real."""


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder as a user's after `make demo` twice: the configs, and the default
    registry (runs/registry) where the demo's endpoint served version 1, then 2."""
    (tmp_path / "configs").symlink_to(REPO / "configs")
    registry = LocalRegistry(tmp_path / "runs" / "registry")
    for number in (1, 2):
        folder = tmp_path / f"model-{number}"
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        version = registry.register(model="docstrings-minilm", model_dir=str(folder), metrics={})
        registry.deploy(version, EXAMPLE_ENDPOINT)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def actions(monkeypatch: pytest.MonkeyPatch) -> None:
    """The actions that leave this machine or take minutes raise Reached instead: a local
    run (tests/pipelines), a call to Vertex AI (tests/vertex), the prediction server
    (tests/test_registry_cli.py)."""

    def reached(what: str) -> Any:
        def action(*args: Any, **kwargs: Any) -> None:
            raise Reached(what)

        return action

    monkeypatch.setattr(cli_run, "run_local", reached("a local run"))
    for name in ("submit", "create_schedule", "list_schedules", "find_schedule"):
        monkeypatch.setattr(vertex_submit, name, reached(f"Vertex AI: {name}"))
    monkeypatch.setattr(cli_vertex, "upload_template", reached("Artifact Registry: upload"))
    monkeypatch.setattr(cli_serve, "main", reached("the prediction server"))


#: Each once: `pipeline.py --help` repeats some of its subcommands' examples.
PIPELINE_EXAMPLES = [
    list(command)
    for command in dict.fromkeys(
        tuple(command) for _, command in all_examples() if command[:2] == ["python", "pipeline.py"]
    )
]


@pytest.mark.parametrize("command", PIPELINE_EXAMPLES, ids=lambda c: " ".join(c[2:])[:80])
def test_each_pipeline_example_runs_as_written(
    command: list[str], checkout: Path, actions: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each `pipeline.py` example of every --help, run as written in a user's checkout, gets
    through the config, the fit check and every flag check to what it asks for."""
    try:
        code = cli.main(command[2:])
    except Reached:
        code = 0
    except SystemExit as exit_:  # --help
        code = exit_.code if isinstance(exit_.code, int) else 1
    err = capsys.readouterr().err
    assert code == 0, err
    assert "error:" not in err


@pytest.mark.parametrize(
    "command",
    [command for _, command in all_examples() if command not in PIPELINE_EXAMPLES],
    ids=lambda c: " ".join(c)[:80],
)
def test_each_image_command_example_parses(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The `python -m` commands run in the images (tests/containers runs them there)."""
    if "--help" in command:  # it prints the help and exits 0
        with pytest.raises(SystemExit) as exit_:
            parse_example(command)
        assert exit_.value.code == 0
        assert "examples:" in capsys.readouterr().out
        return
    parse_example(command)


def test_examples_name_only_configs_and_endpoints_that_exist() -> None:
    configs = sorted((REPO / "configs").glob("*.json"))
    endpoints = {load_config(path).config.deploy.endpoint_name() for path in configs}
    problems = []
    for prog, command in all_examples():
        for flag, value in itertools.pairwise(command):
            if flag == "--endpoint" and value not in endpoints:
                problems.append(f"{prog}: endpoint {value!r} is made by no config in configs/")
            if value.startswith("configs/") and not (REPO / value).is_file():
                problems.append(f"{prog}: {value} does not exist")
    assert not problems, "\n".join(problems)


def test_a_run_is_the_default_command() -> None:
    parser = cli.build_parser()
    argv = ["--config", "configs/local.json", "--set", "train.epochs=2", "--dry-run"]
    assert parser.parse_args(cli.with_command(argv)) == parser.parse_args(["run", *argv])
    assert cli.with_command([]) == ["run"]
    assert cli.with_command(["--help"]) == ["--help"]
    assert cli.with_command(["registry", "--help"]) == ["registry", "--help"]


def test_an_unknown_subcommand_is_refused_in_one_line() -> None:
    result = run_pipeline("regsitry")
    assert result.returncode == 2
    assert "invalid choice: 'regsitry'" in result.stderr


def test_no_command_asks_for_a_config() -> None:
    result = run_pipeline()
    assert result.returncode == 2
    assert "--config is required" in result.stderr


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--wait"], "--wait"),
        (["--no-deploy", "--preflight"], "--preflight, --no-deploy"),
        (["--compile", "{folder}/out.yaml"], "--compile"),
        (["--pipeline-root", "gs://acme/runs"], "--pipeline-root gs://acme/runs"),
    ],
)
def test_a_vertex_flag_on_a_local_config_is_refused_naming_both(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A flag that asks for Vertex AI beside a config written to run here: the message names
    the flag and the config, not the fit check's unknown machine type ('local-cpu') that
    used to stand in for it. Nothing is written."""
    argv = [flag.format(folder=tmp_path) for flag in flags]

    code = cli.main(["--config", str(REPO / "configs" / "local.json"), *argv])

    err = capsys.readouterr().err
    assert code == 2
    assert f"error: {named} makes this a Vertex AI command" in err
    assert 'configs/local.json is written to run here (deploy.target "local")' in err
    assert "fit check" not in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_compile_with_dry_run_describes_the_spec_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--dry-run` means nothing is written, with --compile as with a run: the steps of the
    spec that would be written, and where."""
    spec = tmp_path / "spec.yaml"
    config = str(REPO / "configs" / "small1vm1gpu.json")

    code = cli.main(
        ["--config", config, "--compile", str(spec), "--project", "acme-ml", "--dry-run"]
    )

    out = capsys.readouterr().out
    assert code == 0
    assert "finetune: custom job, 1 replica of a2-highgpu-1g with 1 x NVIDIA_TESLA_A100" in out
    assert out.rstrip().endswith(f"Would write the pipeline spec to {spec}")
    assert list(tmp_path.iterdir()) == []


def test_check_fit_with_skip_fit_check_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--check-fit won silently, and the --skip-fit-check the user also typed did nothing."""
    config = str(REPO / "configs" / "local.json")

    assert cli.main(["--config", config, "--check-fit", "--skip-fit-check"]) == 2

    out, err = capsys.readouterr()
    assert (
        err
        == "error: --check-fit runs only the fit check and --skip-fit-check skips it: give one\n"
    )
    assert out == ""
