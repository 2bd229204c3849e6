"""One command tree: `pipeline.py --help` names every subcommand, and every example that a
`--help` shows parses, with configs and endpoint names that the repository has."""

from __future__ import annotations

import argparse
import importlib
import itertools
import re
import shlex
from collections.abc import Iterator

import pytest

from llm_pipeline import cli
from llm_pipeline.config import load_config

from .pipeline_cli import REPO, run_pipeline

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


@pytest.mark.parametrize(
    "command", [command for _, command in all_examples()], ids=lambda c: " ".join(c)[:80]
)
def test_each_example_parses(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
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
