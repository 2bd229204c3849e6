"""benchmarks/codebase_shape.py: its import-cycle finder and its chain from pipeline.py to
Trainer.train, rebuilt from recorded events, on small planted cases."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "codebase_shape.py"


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("codebase_shape", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


shape = _script()


def _package(root: Path, files: dict[str, str]) -> Path:
    src = root / "src"
    for name, text in files.items():
        path = src / "llm_pipeline" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(text))
    return src


def test_cycles_are_found_as_the_suite_finds_them(tmp_path: Path) -> None:
    src = tmp_path / "src"
    package = src / "llm_pipeline"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from llm_pipeline.b import x\n")
    (package / "b.py").write_text("def f():\n    import llm_pipeline.a\n")
    assert shape.import_cycles(src, on_import_only=True) == []
    assert shape.import_cycles(src, on_import_only=False) == [["llm_pipeline.a", "llm_pipeline.b"]]


def test_small_modules_leave_out_faces_and_step_modules(tmp_path: Path) -> None:
    src = _package(tmp_path, {"__init__.py": "", "steps/train.py": "", "tiny.py": ""})
    scattered = [p.name for p in shape.package_files(src) if not shape.is_face_or_step(p, src)]
    assert scattered == ["tiny.py"]


CHECKOUT = Path("/tmp/checkout")
OWN = str(CHECKOUT / "src" / "llm_pipeline")


def _event(event: str, pid: int, ancestors: list[int], files: list[str], **extra: Any) -> str:
    record = {"event": event, "pid": pid, "ppid": ancestors[0], "ancestors": ancestors}
    return json.dumps({"child": None, "argv": ["python"], "files": files, **record, **extra})


def _run(train_llm_pipeline: str = OWN) -> list[str]:
    """pipeline.py (100) → sh (200, not Python) → KFP executor (300) → torchrun (400) → rank
    (500), with an unrelated Popen in 100 and a second process (600) that never trains."""
    return [
        _event("popen", 100, [1], [f"{CHECKOUT}/pipeline.py", "/venv/kfp/x.py"], child=999),
        _event(
            "popen",
            100,
            [1],
            [
                f"{CHECKOUT}/pipeline.py",
                f"{OWN}/cli.py",
                f"{OWN}/local/run_pipeline.py",
                "/venv/kfp/local/subprocess_task_handler.py",
            ],
            child=200,
        ),
        _event(
            "popen",
            300,
            [200, 100],
            [
                "<frozen runpy>",
                "/venv/kfp/dsl/executor_main.py",
                "/tmp/tmpab/ephemeral_component.py",
                f"{OWN}/steps/finetune.py",
                f"{OWN}/launch/supervisor.py",
            ],
            child=400,
            llm_pipeline=f"{OWN}/__init__.py",
        ),
        _event("popen", 400, [300, 200, 100], ["/venv/torch/run.py"], child=500),
        _event("popen", 600, [100], [f"{OWN}/cli.py"], child=601),
        _event(
            "train",
            500,
            [400, 300, 200, 100],
            [
                f"{train_llm_pipeline}/train/worker.py",
                f"{OWN}/steps/finetune.py",
                "/venv/transformers/trainer.py",
                "/tmp/site/sitecustomize.py",
            ],
        ),
    ]


def test_the_chain_is_the_rank_stack_after_each_ancestor_popen() -> None:
    records = shape.read_records(_run())
    assert shape.longest_chain(records, 100, CHECKOUT) == [
        "pipeline.py",
        "llm_pipeline/cli.py",
        "llm_pipeline/local/run_pipeline.py",
        "component",
        "llm_pipeline/steps/finetune.py",
        "llm_pipeline/launch/supervisor.py",
        "llm_pipeline/train/worker.py",
    ]


def test_a_chain_that_does_not_reach_the_pipeline_is_refused() -> None:
    records = shape.read_records(_run())
    with pytest.raises(shape.ChainError, match="does not descend from the pipeline"):
        shape.longest_chain(records, 12345, CHECKOUT)


def test_a_python_parent_that_did_not_popen_the_child_breaks_the_chain() -> None:
    lines = [line for line in _run() if '"child": 400' not in line]
    lines.append(_event("popen", 300, [200, 100], ["/x.py"], child=777))
    with pytest.raises(shape.ChainError, match=r"started 400 without subprocess\.Popen"):
        shape.longest_chain(shape.read_records(lines), 100, CHECKOUT)


def test_frames_from_another_llm_pipeline_are_refused() -> None:
    records = shape.read_records(_run(train_llm_pipeline="/work/main/src/llm_pipeline"))
    with pytest.raises(shape.ChainError, match="not the checkout's copy"):
        shape.longest_chain(records, 100, CHECKOUT)


def test_a_module_one_task_alone_uses_is_that_tasks(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "__init__.py": "",
            "tasks/__init__.py": "",
            "tasks/summarization/__init__.py": "from llm_pipeline.shared import helper\n",
            "tasks/summarization/task.py": "from llm_pipeline.only_summaries import f\n",
            "data/__init__.py": "",
            # Named for one task: text classification's, whoever imports it.
            "data/classifier_rows.py": "",
            # Imported only by a task's package, or only by a module that is the task's.
            "only_summaries.py": "from llm_pipeline.deeper import g\n",
            "deeper.py": "",
            # On one task's path: under a branch on a kind, or in a function only called there.
            "data/chats.py": "",
            "data/tables.py": "",
            "data/rows.py": """\
                from llm_pipeline.data.chats import render
                from llm_pipeline.data import tables
                from llm_pipeline.shared import helper

                def _chat(batch):
                    return render(batch)

                def rows(task, batch):
                    if task.name != "instruction_tuning":
                        return helper(batch)
                    return _chat(batch)

                def table(kind):
                    return {"classifier": tables.labels}[kind]
                """,
            # Used by every task: shared.
            "shared.py": "",
        },
    )
    found = shape.task_modules_outside(src)
    assert {task: [m for m, _ in modules] for task, modules in found.items()} == {
        "instruction_tuning": ["data.chats"],
        "preference_tuning": [],
        "summarization": ["deeper", "only_summaries"],
        "text_classification": ["data.classifier_rows", "data.tables"],
    }


def test_name_comparisons_are_counted_as_the_seam_test_finds_them(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "__init__.py": "",
            "tasks/__init__.py": 'KINDS = {"seq2seq": 1}\n',  # inside tasks/: not counted
            "fit/shapes.py": """\
                def f(kind, task):
                    if kind == "classifier" or "causal_lm" in task.kinds:
                        return {"seq2seq": 1}[kind]
                    return kind.generates
                """,
        },
    )
    assert shape.name_picks(src) == (2, 3)


def test_evaluate_visits_are_the_checkouts_modules() -> None:
    records = [
        {"event": "visits", "pid": 7, "files": [f"{OWN}/steps/evaluate.py", "/usr/lib/x.py"]},
        {"event": "visits", "pid": 8, "files": [f"{OWN}/evaluation/__init__.py"]},
        {"event": "train", "pid": 9, "files": [f"{OWN}/train/worker.py"]},
    ]
    assert shape.evaluate_visits(records, CHECKOUT) == [
        "llm_pipeline.evaluation",
        "llm_pipeline.steps.evaluate",
    ]


def test_the_recorder_sees_run_evaluate_and_the_evaluation_flow_in_it(tmp_path: Path) -> None:
    """The sitecustomize.py the traced run uses, on a planted step: what runs under
    run_evaluate, in its process and in a process started from it, and of that what runs
    under evaluate_in_processes; not what runs before or after."""
    src = _package(
        tmp_path,
        {
            "__init__.py": "",
            "steps/__init__.py": "",
            "steps/evaluate.py": """
                import subprocess, sys
                from llm_pipeline.evaluation.flow import evaluate_in_processes
                from llm_pipeline.steps.outputs import write

                def run_evaluate():
                    evaluate_in_processes()
                    write()
                """,
            "steps/outputs.py": "def write():\n    pass\n",
            "steps/before.py": "def prepare():\n    pass\n",
            "evaluation/__init__.py": "",
            "evaluation/flow.py": """
                import subprocess, sys
                from llm_pipeline.evaluation.score import score

                def evaluate_in_processes():
                    score()
                    code = "from llm_pipeline.evaluation.rank import work; work()"
                    subprocess.run([sys.executable, "-c", code], check=True)
                """,
            "evaluation/score.py": "def score():\n    pass\n",
            "evaluation/rank.py": "def work():\n    pass\n",
        },
    )
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(shape.SITECUSTOMIZE)
    trace = tmp_path / "trace.jsonl"
    main = (
        "import sys; from llm_pipeline.steps.before import prepare; prepare(); "
        "from llm_pipeline.steps.evaluate import run_evaluate; run_evaluate()"
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join([str(site), str(src)]),
        shape.TRACE_VAR: str(trace),
    }
    argv = [sys.executable, "-c", main, "--function_to_execute", "evaluate"]
    subprocess.run(argv, env=env, check=True, timeout=60)
    records = shape.read_records(trace.read_text().splitlines())
    assert shape.evaluate_visits(records, tmp_path) == [
        "llm_pipeline.evaluation.flow",
        "llm_pipeline.evaluation.rank",
        "llm_pipeline.evaluation.score",
        "llm_pipeline.steps.evaluate",
        "llm_pipeline.steps.outputs",
    ]
    assert shape.evaluate_visits(records, tmp_path, key="flow_files") == [
        "llm_pipeline.evaluation.flow",
        "llm_pipeline.evaluation.rank",
        "llm_pipeline.evaluation.score",
    ]
