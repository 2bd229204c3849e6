"""Dynamic batching: inputs from concurrent requests share one model call.

A generate call (or a classifier's forward pass) on a batch of 16 costs little more than
one on a single text (the weights are read once per step either way), so the server queues
each request's inputs and one worker thread takes them in batches:

* a batch holds at most `max_batch_size` inputs, all with the same parameters (a model
  call has one set of settings);
* the oldest queued input waits at most `max_wait_s` for others to join it, counted from
  when it arrived or from when the worker came free, whichever is later: clients whose
  answers just came back send their next requests a moment later, and an input that waited
  out a running batch would otherwise go alone and cost nearly a full batch's time;
* inputs are taken oldest first, so no request starves behind a stream of others;
* at most `max_queued` inputs wait: a request that would queue more is refused at once
  (`QueueFull`, with how long the queue takes to drain), so a flood of clients gets quick
  refusals instead of answers after their own timeouts;
* a request whose client went away cancels its futures, and its inputs leave the queue
  without reaching the model; inputs already running are marked abandoned (`abandon`), and
  once every input of the running call is, `batch_abandoned` says so: the model asks it at
  every decoding step and ends the call there, instead of finishing texts no one reads.

Only inputs with equal parameters can share a call (one `generate` call has one
temperature, one set of stop strings, one beam width): a batch taken while inputs with other
parameters waited, with room for them, counts as a split (`BatchStats.split_calls`).

The worker is one thread: the model holds the accelerator (or every CPU core) anyway, and
torch releases the GIL while it computes, so the event loop keeps answering health checks
and reading requests. `close` finishes every queued input before the thread ends, so a
shutdown never drops work that was accepted.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
In = TypeVar("In")
Out = TypeVar("Out")


@dataclass
class _Item(Generic[Key, In, Out]):
    group: tuple[Key, int]
    input: In
    arrived: float
    future: Future[Out] = field(default_factory=Future)
    #: Its client went away while it ran (a running future cannot be cancelled).
    abandoned: bool = False


@dataclass(frozen=True)
class BatchStats:
    """What the worker has done so far: how many model calls, and how full they were."""

    calls: int
    inputs: int
    batch_sizes: dict[int, int]
    queued: int
    #: Inputs dropped unrun because their request was cancelled (its client went away).
    cancelled: int = 0
    #: Calls that ran with room to spare while inputs with other parameters waited.
    split_calls: int = 0


class QueueFull(Exception):
    """The queue holds its most inputs; `retry_after_s`: about when it will have room."""

    def __init__(self, queued: int, limit: int, retry_after_s: float) -> None:
        super().__init__(f"{queued} instances are waiting for the model (the limit is {limit})")
        self.retry_after_s = retry_after_s


class Batcher(Generic[Key, In, Out]):
    """Queue inputs under a key; a worker thread runs `run(key, inputs)` on batches of them.

    `run` must return one result per input, in order. With `coalesce=False` a request's
    inputs never share a call with another request's (the no-batching baseline).
    """

    def __init__(
        self,
        run: Callable[[Key, list[In]], Sequence[Out]],
        *,
        max_batch_size: int,
        max_wait_s: float,
        coalesce: bool = True,
        max_queued: int | None = None,
    ) -> None:
        self._run = run
        self._max_batch_size = max_batch_size
        self._max_wait_s = max_wait_s if coalesce else 0.0
        self._coalesce = coalesce
        self._queue: list[_Item[Key, In, Out]] = []
        self._cond = threading.Condition()
        self._closing = False
        self._requests = itertools.count(1)
        self._max_queued = max_queued
        self._sizes: Counter[int] = Counter()
        self._cancelled = 0
        self._splits = 0
        self._call_s = 0.0  # a running mean of a model call's seconds, for Retry-After
        self._free_since = 0.0  # when the worker last finished a batch
        self._running: list[_Item[Key, In, Out]] = []
        self._thread = threading.Thread(target=self._work, name="model", daemon=True)

    def start(self) -> None:
        """Start the worker thread."""
        self._thread.start()

    async def submit(self, key: Key, inputs: Sequence[In]) -> list[Out]:
        """The results for `inputs`, once the worker has run them (in whatever batches)."""
        items = self.enqueue(key, inputs)
        return list(await asyncio.gather(*(asyncio.wrap_future(i.future) for i in items)))

    def enqueue(self, key: Key, inputs: Sequence[In]) -> list[_Item[Key, In, Out]]:
        """Queue `inputs` at once (so a request's inputs stay together); their items.
        Raises QueueFull, queueing none of them, where they would pass `max_queued`."""
        # Without coalescing, the request's own number keeps its inputs in their own batches.
        group = (key, 0 if self._coalesce else next(self._requests))
        now = time.monotonic()
        items: list[_Item[Key, In, Out]] = [
            _Item(group=group, input=one, arrived=now) for one in inputs
        ]
        with self._cond:
            if self._closing:
                raise RuntimeError("the batcher is closed")
            self._drop_cancelled()
            queued = len(self._queue)
            if self._max_queued is not None and queued + len(items) > self._max_queued:
                raise QueueFull(queued, self._max_queued, self._drain_s(queued + len(items)))
            self._queue.extend(items)
            self._cond.notify()
        return items

    def abandon(self, items: Sequence[_Item[Key, In, Out]]) -> int:
        """Mark `items` (a request whose client went away) as no longer wanted: queued ones
        are cancelled, running ones marked; how many were cancelled unrun."""
        dropped = 0
        with self._cond:
            for item in items:
                if item.future.cancel():
                    dropped += 1
                else:
                    item.abandoned = True
        return dropped

    def batch_abandoned(self) -> bool:
        """Whether every input of the call running now has been abandoned by its client."""
        with self._cond:
            return bool(self._running) and all(item.abandoned for item in self._running)

    def stats(self) -> BatchStats:
        """Counts so far (calls, inputs, calls per batch size, inputs waiting)."""
        with self._cond:
            self._drop_cancelled()
            sizes = dict(sorted(self._sizes.items()))
            queued = len(self._queue)
            cancelled, splits = self._cancelled, self._splits
        return BatchStats(
            calls=sum(sizes.values()),
            inputs=sum(size * n for size, n in sizes.items()),
            batch_sizes=sizes,
            queued=queued,
            cancelled=cancelled,
            split_calls=splits,
        )

    def drain_s(self) -> float:
        """About how long the queue takes to run (at least 1 s): a client's `Retry-After`."""
        with self._cond:
            return self._drain_s(len(self._queue))

    def _drain_s(self, inputs: int) -> float:
        calls = -(-inputs // self._max_batch_size)  # rounded up
        return max(1.0, calls * self._call_s)

    def close(self, timeout_s: float | None = None) -> None:
        """Run what is queued, then stop the worker; blocks (call it off the event loop)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _work(self) -> None:
        while (taken := self._next_batch()) is not None:
            # A request cancelled since the batch was taken: skip its inputs. The rest are
            # marked running, so a cancel can no longer race with their results.
            batch = [item for item in taken if item.future.set_running_or_notify_cancel()]
            with self._cond:
                self._cancelled += len(taken) - len(batch)
                if batch:
                    self._sizes[len(batch)] += 1
                self._running = batch
            if not batch:
                continue
            key = batch[0].group[0]
            started = time.monotonic()
            try:
                results = list(self._run(key, [item.input for item in batch]))
                if len(results) != len(batch):
                    raise RuntimeError(f"{len(results)} results for {len(batch)} inputs")
            except BaseException as exc:  # every waiting request hears of it
                for item in batch:
                    item.future.set_exception(exc)
            else:
                for item, result in zip(batch, results, strict=True):
                    item.future.set_result(result)
            with self._cond:
                self._running = []
                self._free_since = time.monotonic()
                seconds = self._free_since - started
                self._call_s = seconds if not self._call_s else 0.8 * self._call_s + 0.2 * seconds

    def _next_batch(self) -> list[_Item[Key, In, Out]] | None:
        """The next batch to run, waiting for one to fill or its time to pass; None: closed."""
        with self._cond:
            while True:
                self._drop_cancelled()
                if not self._queue:
                    if self._closing:
                        return None
                    self._cond.wait()
                    continue
                oldest = self._queue[0]
                mates = [item for item in self._queue if item.group == oldest.group]
                since = max(oldest.arrived, self._free_since)
                wait = since + self._max_wait_s - time.monotonic()
                if len(mates) >= self._max_batch_size or wait <= 0 or self._closing:
                    batch = mates[: self._max_batch_size]
                    taken = {id(item) for item in batch}
                    self._queue = [item for item in self._queue if id(item) not in taken]
                    if self._coalesce and len(batch) < self._max_batch_size and self._queue:
                        self._splits += 1  # inputs with other parameters waited, and had room
                    return batch
                self._cond.wait(timeout=wait)

    def _drop_cancelled(self) -> None:
        """Take the inputs of cancelled requests out of the queue (the lock is held)."""
        kept = [item for item in self._queue if not item.future.cancelled()]
        self._cancelled += len(self._queue) - len(kept)
        self._queue = kept
