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
* inputs are taken oldest first, so no request starves behind a stream of others.

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


@dataclass(frozen=True)
class BatchStats:
    """What the worker has done so far: how many model calls, and how full they were."""

    calls: int
    inputs: int
    batch_sizes: dict[int, int]
    queued: int


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
    ) -> None:
        self._run = run
        self._max_batch_size = max_batch_size
        self._max_wait_s = max_wait_s if coalesce else 0.0
        self._coalesce = coalesce
        self._queue: list[_Item[Key, In, Out]] = []
        self._cond = threading.Condition()
        self._closing = False
        self._requests = itertools.count(1)
        self._sizes: Counter[int] = Counter()
        self._free_since = 0.0  # when the worker last finished a batch
        self._thread = threading.Thread(target=self._work, name="model", daemon=True)

    def start(self) -> None:
        """Start the worker thread."""
        self._thread.start()

    async def submit(self, key: Key, inputs: Sequence[In]) -> list[Out]:
        """The results for `inputs`, once the worker has run them (in whatever batches)."""
        items = self.enqueue(key, inputs)
        return list(await asyncio.gather(*(asyncio.wrap_future(i.future) for i in items)))

    def enqueue(self, key: Key, inputs: Sequence[In]) -> list[_Item[Key, In, Out]]:
        """Queue `inputs` at once (so a request's inputs stay together); their items."""
        # Without coalescing, the request's own number keeps its inputs in their own batches.
        group = (key, 0 if self._coalesce else next(self._requests))
        now = time.monotonic()
        items: list[_Item[Key, In, Out]] = [
            _Item(group=group, input=one, arrived=now) for one in inputs
        ]
        with self._cond:
            if self._closing:
                raise RuntimeError("the batcher is closed")
            self._queue.extend(items)
            self._cond.notify()
        return items

    def stats(self) -> BatchStats:
        """Counts so far (calls, inputs, calls per batch size, inputs waiting)."""
        with self._cond:
            sizes = dict(sorted(self._sizes.items()))
            queued = len(self._queue)
        return BatchStats(
            calls=sum(sizes.values()),
            inputs=sum(size * n for size, n in sizes.items()),
            batch_sizes=sizes,
            queued=queued,
        )

    def close(self, timeout_s: float | None = None) -> None:
        """Run what is queued, then stop the worker; blocks (call it off the event loop)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            # A request whose client went away has its futures cancelled: skip its inputs.
            # The rest are marked running, so a cancel can no longer race with their results.
            batch = [item for item in batch if item.future.set_running_or_notify_cancel()]
            if not batch:
                continue
            key = batch[0].group[0]
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
                self._free_since = time.monotonic()

    def _next_batch(self) -> list[_Item[Key, In, Out]] | None:
        """The next batch to run, waiting for one to fill or its time to pass; None: closed."""
        with self._cond:
            while True:
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
                    self._sizes[len(batch)] += 1
                    return batch
                self._cond.wait(timeout=wait)
