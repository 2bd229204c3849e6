"""README.md's paths, commands, flags and make targets exist: a config, script, flag or target
renamed without the README fails here.

Nothing is run. Each `python pipeline.py ...` command the README shows goes through the CLI's
own parser (argparse only: nothing is loaded), and each key it `--set`s must be a field of the
config models. A benchmark's flags are read from its `add_argument` calls with `ast` (importing
one would import torch), with those of the benchmark modules it imports (`corpus.py`'s
`--data`). Make targets and variables are read from the Makefile's text.
"""

import argparse
import ast
import contextlib
import io
import re
import shlex
import types
import typing
from functools import cache
from pathlib import Path

import pydantic
import pytest

from llm_pipeline.cli import build_parser, with_command
from llm_pipeline.config import PipelineConfig

from .test_architecture import FILE, problem, references, source_file

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")
BENCHMARKS = REPO / "benchmarks"

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: A path under one of the repository's own top-level folders, as the README writes it.
REPO_PATH = re.compile(
    r"(?<![\w./-])(?:configs|benchmarks|containers|tests|docs|pipelines|components|src)"
    r"/[\w.-]+(?:/[\w.-]+)*"
)
#: `make TARGET`, with the `VAR=value` words before and after it.
MAKE_COMMAND = re.compile(r"(?:\b[A-Z_]+=\S*\s+)*\bmake\s+[a-z][\w-]*(?:\s+[A-Z_]+=\S*)*")


def commands(prefix: str) -> list[str]:
    """Every command line that starts with `prefix`: in code blocks (joined across a trailing
    backslash, comments dropped) and in one-line code spans."""
    found = []
    for block in FENCE.findall(README):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith(prefix):
                found.append(line.strip())
    found += [span for span in SPAN.findall(README) if span.startswith(prefix)]
    return found


def words(command: str) -> list[str]:
    """`command`'s words as a shell splits them, comments dropped, an optional `[--flag X]`
    taken as written out and `a|b|c` as its first choice."""
    out = []
    for word in shlex.split(command, comments=True):
        word = word.removeprefix("[").removesuffix("]")
        out.append(word.split("|")[0] if re.fullmatch(r"\w+(\|\w+)+", word) else word)
    return out


def test_each_path_the_readme_names_exists() -> None:
    problems = []
    for link in LINK.findall(README):
        target = link.split("#")[0]
        if target and "://" not in target and not (REPO / target).exists():
            problems.append(f"link ({link}): no {target} in the repository")
    for path in sorted(set(REPO_PATH.findall(README))):
        if not (REPO / path.rstrip(".")).exists():
            problems.append(f"{path}: no such file or folder in the repository")
    for span in SPAN.findall(README):  # a bare `name.py` may also be a benchmark's
        if FILE.match(span) and not (source_file(span) or (BENCHMARKS / span).is_file()):
            problems.append(f"{span}: no such file under src/llm_pipeline/, benchmarks/ or /")
    problems += [p for path, name in references(README) if (p := problem(path, name))]
    assert not problems, "README.md:\n" + "\n".join(problems)


PIPELINE_COMMANDS = commands("python pipeline.py")


def test_the_readme_shows_pipeline_commands() -> None:
    """The extraction finds them (a changed notation would find none and check nothing)."""
    assert len(PIPELINE_COMMANDS) >= 20, PIPELINE_COMMANDS
    assert any("--preflight" in command for command in PIPELINE_COMMANDS)


def parsed(argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """The CLI's parse of `argv` (None for `--help`, which exits 0), and what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        try:
            return build_parser().parse_args(with_command(argv)), ""
        except SystemExit as exit:
            if exit.code == 0:
                return None, ""
            return None, printed.getvalue().strip() or f"exit {exit.code}"


def config_key_problem(key: str) -> str | None:
    """Why `--set key=...` names no config setting, or None if it names one (a dict-valued
    setting, such as `data.max_samples`, takes any key under it)."""
    model: type[pydantic.BaseModel] | None = PipelineConfig
    for depth, part in enumerate(key.split(".")):
        if model is None:
            return None  # inside a dict-valued setting
        field = model.model_fields.get(part)
        if field is None:
            where = ".".join(key.split(".")[:depth]) or "the top level"
            return f"--set {key}: {where} has no key {part!r}"
        annotation = field.annotation
        choices = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
        model = next(
            (
                kind
                for kind in (annotation, *choices)
                if isinstance(kind, type) and issubclass(kind, pydantic.BaseModel)
            ),
            None,
        )
    return None


@pytest.mark.parametrize("command", PIPELINE_COMMANDS, ids=lambda c: " ".join(words(c)[2:]))
def test_each_pipeline_command_in_the_readme_parses(command: str) -> None:
    argv = words(command)[2:]
    _, error = parsed(argv)
    assert not error, f"README.md: `{command}`:\n{error}"
    keys = [argv[i + 1].split("=")[0] for i, word in enumerate(argv[:-1]) if word == "--set"]
    problems = [p for key in keys if (p := config_key_problem(key))]
    assert not problems, f"README.md: `{command}`: " + "; ".join(problems)


def test_the_checks_catch_a_wrong_flag_and_a_wrong_key() -> None:
    assert parsed(["--config", "configs/local.json", "--dry-run"])[1] == ""
    assert "--dry-runs" in parsed(["--config", "configs/local.json", "--dry-runs"])[1]
    assert config_key_problem("train.lora.r") is None  # through `LoraConfig | None`
    assert config_key_problem("data.max_samples.train") is None  # a dict's own keys
    assert config_key_problem("train.learnin_rate") is not None
    assert config_key_problem("train.lora.rank") is not None
    assert words("python pipeline.py schedules pause|resume|delete NAME [--wait]  # x") == [
        *("python", "pipeline.py", "schedules", "pause", "NAME", "--wait")
    ]


@cache
def benchmark_flags(script: Path) -> frozenset[str]:
    """The flags `script`'s `add_argument` calls define, and those of the benchmark modules it
    imports by name (`import corpus`)."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    flags: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {
                arg.value
                for arg in node.args
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("--")
            }
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for name in names:
                sibling = script.parent / f"{name}.py"
                if sibling.is_file() and sibling != script:
                    flags |= benchmark_flags(sibling)
    return frozenset(flags)


BENCHMARK_COMMANDS = commands("python benchmarks/")


def test_each_benchmark_flag_the_readme_shows_is_in_its_parser() -> None:
    assert len(BENCHMARK_COMMANDS) >= 10, BENCHMARK_COMMANDS
    problems = []
    for command in BENCHMARK_COMMANDS:
        script, *argv = words(command)[1:]
        if not (REPO / script).is_file():
            problems.append(f"`{command}`: no {script}")
            continue
        known = benchmark_flags(REPO / script)
        problems += [
            f"`{command}`: {script} has no {flag}"
            for word in argv
            if word.startswith("--") and (flag := word.split("=")[0]) not in known
        ]
    assert not problems, "README.md:\n" + "\n".join(problems)


def make_commands() -> list[str]:
    """Every `make TARGET ...` (with `VAR=value` words before or after) the README shows."""
    lines = [line for block in FENCE.findall(README) for line in block.splitlines()]
    return [
        match.group(0)
        for text in [*lines, *SPAN.findall(README)]
        for match in MAKE_COMMAND.finditer(text)
    ]


def test_each_make_target_and_variable_the_readme_shows_is_in_the_makefile() -> None:
    shown = make_commands()
    assert {"make demo", "make test"} <= set(shown), shown
    problems = []
    for command in shown:
        (target,) = re.findall(r"\bmake\s+([\w-]+)", command)
        if not re.search(rf"^{re.escape(target)}:", MAKEFILE, re.MULTILINE):
            problems.append(f"`{command}`: the Makefile has no target {target}")
        for variable in re.findall(r"\b([A-Z_]+)=", command):
            if f"$({variable})" not in MAKEFILE:
                problems.append(f"`{command}`: the Makefile reads no {variable}")
    assert not problems, "README.md:\n" + "\n".join(problems)
