"""The batching queue on its own: coalescing, limits, grouping by settings, draining."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from llm_pipeline.serve.batching import Batcher


class Recorder:
    """A stand-in for the model: records every call, answers `key:text`."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.delay_s = delay_s
        self.lock = threading.Lock()

    def __call__(self, key: str, texts: list[str]) -> list[str]:
        time.sleep(self.delay_s)
        with self.lock:
            self.calls.append((key, list(texts)))
        return [f"{key}:{text}" for text in texts]


Requests = list[tuple[str, list[str]]]


async def _submit_all(batcher: Batcher[str, str, str], requests: Requests) -> list:
    return list(await asyncio.gather(*(batcher.submit(key, texts) for key, texts in requests)))


def test_concurrent_requests_share_calls_up_to_the_batch_size() -> None:
    run = Recorder()
    batcher = Batcher(run, max_batch_size=4, max_wait_s=0.2)
    batcher.start()
    requests = [("k", [f"t{i}"]) for i in range(10)]
    answers = asyncio.run(_submit_all(batcher, requests))
    batcher.close()
    assert answers == [[f"k:t{i}"] for i in range(10)]
    assert [len(texts) for _, texts in run.calls] == [4, 4, 2]
    assert batcher.stats().batch_sizes == {2: 1, 4: 2}


def test_different_settings_never_share_a_call() -> None:
    run = Recorder()
    batcher = Batcher(run, max_batch_size=16, max_wait_s=0.1)
    batcher.start()
    requests = [("greedy" if i % 3 else "beams", [f"t{i}"]) for i in range(9)]
    answers = asyncio.run(_submit_all(batcher, requests))
    batcher.close()
    assert answers == [[f"{key}:{texts[0]}"] for key, texts in requests]
    assert sorted((key, len(texts)) for key, texts in run.calls) == [("beams", 3), ("greedy", 6)]


def test_without_coalescing_each_request_runs_alone() -> None:
    run = Recorder()
    batcher = Batcher(run, max_batch_size=16, max_wait_s=1.0, coalesce=False)
    batcher.start()
    requests = [("k", ["a", "b"]), ("k", ["c"]), ("k", ["d", "e", "f"])]
    answers = asyncio.run(_submit_all(batcher, requests))
    batcher.close()
    assert answers == [["k:a", "k:b"], ["k:c"], ["k:d", "k:e", "k:f"]]
    assert sorted(texts for _, texts in run.calls) == [["a", "b"], ["c"], ["d", "e", "f"]]


def test_a_lone_request_waits_at_most_max_wait() -> None:
    batcher = Batcher(Recorder(), max_batch_size=16, max_wait_s=0.05)
    batcher.start()
    started = time.monotonic()
    assert asyncio.run(_submit_all(batcher, [("k", ["x"])])) == [["k:x"]]
    assert time.monotonic() - started < 1.0
    batcher.close()


def test_close_runs_what_is_queued_before_stopping() -> None:
    run = Recorder(delay_s=0.05)
    batcher = Batcher(run, max_batch_size=2, max_wait_s=0.0)
    batcher.start()
    items = batcher.enqueue("k", [f"t{i}" for i in range(7)])
    batcher.close()
    assert [item.future.result(timeout=0) for item in items] == [f"k:t{i}" for i in range(7)]
    with pytest.raises(RuntimeError, match="closed"):
        batcher.enqueue("k", ["late"])


def test_a_failing_call_fails_only_its_own_requests() -> None:
    def run(key: str, texts: list[str]) -> list[str]:
        if key == "bad":
            raise ValueError("generation failed")
        return texts

    batcher = Batcher(run, max_batch_size=8, max_wait_s=0.05)
    batcher.start()

    async def both() -> list:
        return list(
            await asyncio.gather(
                batcher.submit("bad", ["x"]), batcher.submit("good", ["y"]), return_exceptions=True
            )
        )

    bad, good = asyncio.run(both())
    batcher.close()
    assert isinstance(bad, ValueError) and good == ["y"]


def test_texts_of_a_request_that_went_away_are_skipped() -> None:
    run = Recorder(delay_s=0.1)
    batcher = Batcher(run, max_batch_size=1, max_wait_s=0.0)
    batcher.start()
    first = batcher.enqueue("k", ["running"])
    time.sleep(0.05)  # the worker has taken the first text
    gone, kept = batcher.enqueue("k", ["gone"]), batcher.enqueue("k", ["kept"])
    assert gone[0].future.cancel()
    batcher.close()
    assert first[0].future.result(timeout=0) == "k:running"
    assert kept[0].future.result(timeout=0) == "k:kept"
    assert [texts for _, texts in run.calls] == [["running"], ["kept"]]
