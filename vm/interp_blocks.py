"""Blocks that wait for each other (`tile_wait`, `tile_post`): each block of each launch
runs in a thread of its own, and a scheduler lets exactly one run at a time, switching
only at the synchronization points, so the interpreter stays deterministic.

    scheduler = BlockScheduler(seed=7)     # None: in order, the lowest ready block first
    scheduler.run([Task(key, run_block) for ...])
    # inside a block:  scheduler.pause(task)                          (after a post)
    #                  scheduler.pause(task, ready_when=reached, site=...)   (a wait)

At every pause the scheduler picks the next block to run among those ready: not
started, paused after a post, or waiting on a condition that now holds (the pausing
block included). With a seed the pick is uniform at random (an adversarial
interleaving: a consumer's blocks may start before any producer block, a producer may
stop after any post); without one, the lowest ready block in task order, which runs a
single launch in the interpreter's usual block order. When no block is ready and some
have not finished, every one of those waits on a condition no remaining block can
make true: a deadlock, raised as a `VMError` at the wait of the first such block. An
error in a block ends the whole run with that error.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilevm.ir.errors import VMError

__all__ = ["BlockScheduler", "Task", "MAX_THREADS"]

MAX_THREADS = 4096  # blocks a synchronized run may hold started at once (one thread each)


class _Aborted(BaseException):
    """Unwinds a paused block when the run ends early (an error or a deadlock): a
    BaseException, so that no handler of the interpreter's errors catches it."""


@dataclass(eq=False)
class Task:
    """One block: its key (for messages and the in-order pick) and what runs it."""

    key: Any
    run: Callable[[], None]
    thread: threading.Thread | None = None
    done: bool = False
    ready_when: Callable[[], bool] | None = None
    site: Callable[[], VMError] | None = None  # the deadlock error, at the wait's line
    aborted: bool = field(default=False)


class BlockScheduler:
    """Runs tasks one at a time, switching at `pause` (module docstring)."""

    def __init__(self, seed: int | None) -> None:
        self.rng = random.Random(seed) if seed is not None else None
        self.cond = threading.Condition()
        self.tasks: list[Task] = []
        self.current: Task | None = None
        self.failure: BaseException | None = None
        self.started = 0

    def run(self, tasks: Sequence[Task]) -> None:
        """Run every task to its end (or the first error, or a deadlock: raised here)."""
        self.tasks = list(tasks)
        with self.cond:
            self._pass_on()
            while self.failure is None and not all(t.done for t in self.tasks):
                self.cond.wait()
            for task in self.tasks:
                task.aborted = True
            self.cond.notify_all()
        for task in self.tasks:
            if task.thread is not None:
                task.thread.join()
        if self.failure is not None:
            raise self.failure

    def pause(self, task: Task, ready_when: Callable[[], bool] | None = None,
              site: Callable[[], VMError] | None = None) -> None:
        """Let another block run; come back when picked (and, with `ready_when`, once it
        holds). `site` makes the deadlock's error for this wait."""
        with self.cond:
            task.ready_when, task.site = ready_when, site
            self._pass_on()
            while self.current is not task and not task.aborted:
                self.cond.wait()
            if task.aborted:
                raise _Aborted
            task.ready_when = task.site = None

    # ---- (holding the lock) -----------------------------------------------------------
    def _pass_on(self) -> None:
        ready = [t for t in self.tasks if not t.done and (t.ready_when is None
                                                           or t.ready_when())]
        if not ready:
            waiting = [t for t in self.tasks if not t.done]
            if waiting:
                first = waiting[0]
                self.failure = first.site() if first.site is not None else VMError(
                    f"deadlock: block {first.key} cannot go on")
            self.current = None
            self.cond.notify_all()
            return
        pick = ready[self.rng.randrange(len(ready))] if self.rng is not None else ready[0]
        self.current = pick
        if pick.thread is None:
            self.started += 1
            if self.started - sum(t.done for t in self.tasks) > MAX_THREADS:
                self.failure = VMError(
                    f"more than {MAX_THREADS} blocks are started and unfinished at once; "
                    f"the interpreter runs blocks that wait for each other as threads: "
                    f"use a smaller grid")
                self.current = None
            else:
                pick.thread = threading.Thread(target=self._body, args=(pick,), daemon=True)
                pick.thread.start()
        self.cond.notify_all()

    def _body(self, task: Task) -> None:
        with self.cond:
            while self.current is not task and not task.aborted:
                self.cond.wait()
            if task.aborted:
                return
        try:
            task.run()
        except _Aborted:
            return
        except BaseException as exc:  # noqa: BLE001 (any error ends the run, re-raised there)
            with self.cond:
                if self.failure is None:
                    self.failure = exc
                task.done = True
                self.cond.notify_all()
            return
        with self.cond:
            task.done = True
            self._pass_on()
