"""The batching queue on its own: coalescing, limits, grouping by settings, draining."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from llm_pipeline.serve.batching import Batcher, QueueFull


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


def test_a_full_queue_refuses_a_request_whole_and_says_when_to_retry() -> None:
    run = Recorder(delay_s=0.2)
    batcher = Batcher(run, max_batch_size=2, max_wait_s=0.0, max_queued=5)
    batcher.start()
    first = batcher.enqueue("k", ["a", "b"])
    time.sleep(0.1)  # the worker runs a, b: the queue is empty again
    waiting = batcher.enqueue("k", ["c", "d", "e", "f"])
    with pytest.raises(QueueFull, match=r"4 instances are waiting for the model \(the limit is 5"):
        batcher.enqueue("k", ["g", "h"])  # 6 > 5: none of them queued
    # Room for one more: a refusal queues nothing, so this fits.
    last = batcher.enqueue("k", ["i"])
    batcher.close()
    assert [i.future.result(timeout=0) for i in first + waiting + last] == [
        f"k:{t}" for t in "abcdefi"
    ]
    assert sorted(text for _, texts in run.calls for text in texts) == list("abcdefi")
    # Retry-After: the calls the queue needs at the measured seconds per call.
    with pytest.raises(QueueFull) as full:
        Batcher(run, max_batch_size=2, max_wait_s=0.0, max_queued=1).enqueue("k", ["x", "y"])
    assert full.value.retry_after_s == 1.0  # nothing measured yet: the floor


def test_cancelled_inputs_leave_the_queue_unrun_and_are_counted() -> None:
    run = Recorder(delay_s=0.2)
    batcher = Batcher(run, max_batch_size=4, max_wait_s=0.0, max_queued=6)
    batcher.start()
    running = batcher.enqueue("k", ["r"])
    time.sleep(0.05)  # the worker is inside the call for r
    gone = batcher.enqueue("k", [f"g{i}" for i in range(6)])  # the queue is full
    for item in gone:
        assert item.future.cancel()  # what the route does when its client leaves
    kept = batcher.enqueue("k", ["kept"])  # the cancelled ones no longer take room
    assert batcher.stats().queued == 1
    batcher.close()
    assert running[0].future.result(timeout=0) == "k:r"
    assert kept[0].future.result(timeout=0) == "k:kept"
    assert [texts for _, texts in run.calls] == [["r"], ["kept"]]
    stats = batcher.stats()
    assert (stats.cancelled, stats.inputs, stats.batch_sizes) == (6, 2, {1: 2})


def test_calls_split_by_parameters_are_counted() -> None:
    run = Recorder(delay_s=0.1)
    batcher = Batcher(run, max_batch_size=4, max_wait_s=0.0)
    batcher.start()
    busy = batcher.enqueue("t=0", ["busy"])
    time.sleep(0.05)  # the worker is busy: the next four wait together
    items = [batcher.enqueue(f"t={i % 2}", [f"x{i}"])[0] for i in range(4)]
    batcher.close()
    assert [i.future.result(timeout=0) for i in busy + items] == [
        "t=0:busy",
        "t=0:x0",
        "t=1:x1",
        "t=0:x2",
        "t=1:x3",
    ]
    # Four inputs fit one call; their two temperatures made two, the first with the
    # other's inputs waiting: one split. The last call had nobody else waiting.
    assert [len(texts) for _, texts in run.calls] == [1, 2, 2]
    assert batcher.stats().split_calls == 1


def test_a_running_call_whose_clients_all_left_is_told_to_stop() -> None:
    """A running future cannot be cancelled: its items are marked abandoned, and once all of
    the running call's are, `batch_abandoned` says so (the model asks it at each step)."""
    started, steps = threading.Event(), []
    holder: dict[str, Batcher[str, str, str]] = {}

    def run(key: str, texts: list[str]) -> list[str]:
        started.set()
        for step in range(500):  # up to 5 s of "decoding steps"
            if holder["batcher"].batch_abandoned():
                break
            steps.append(step)
            time.sleep(0.01)
        return texts

    batcher = holder["batcher"] = Batcher(run, max_batch_size=4, max_wait_s=0.0)
    batcher.start()
    first = batcher.enqueue("k", ["a", "b"])
    assert started.wait(5)
    second = batcher.enqueue("k", ["c"])  # queued behind the running call
    assert batcher.abandon(first[:1]) == 0  # running: marked, not cancelled
    time.sleep(0.1)
    assert not batcher.batch_abandoned()  # "b" is still wanted
    assert batcher.abandon(second) == 1  # queued: cancelled unrun
    assert batcher.abandon(first[1:]) == 0
    done_by = time.monotonic() + 1.0
    while len(steps) < 500 and time.monotonic() < done_by and first[1].future.running():
        time.sleep(0.01)
    assert first[1].future.result(timeout=1) == "b"
    assert len(steps) < 100, "the call ran on after every client had gone"
    batcher.close()
    assert batcher.stats().cancelled == 1
