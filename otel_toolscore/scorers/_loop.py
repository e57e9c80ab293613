"""The one event loop every judge runs on, and the bounds and fork rules around it.

litellm keeps loop-bound state, so judge calls from the engine (runs in flight, bounded by
``Inflight``), from sync callers (``run_sync``: the CLI, tests, ``score()``) and from any other
loop (``on_judge_loop``) all run on one daemon thread's loop. Forks wait (bounded) until no judge
thread is inside an import or a pydantic model build (``_ForkFence``).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from types import FrameType
from typing import Any

from otel_toolscore import _fork

logger = logging.getLogger(__name__)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    # asyncio lets SystemExit/KeyboardInterrupt raised in a task out of run_forever; the loop
    # must go on serving the other runs (that task's future has its exception).
    while True:
        try:
            loop.run_forever()
            return
        except BaseException:
            logger.warning("otel-toolscore: the judge loop was interrupted", exc_info=True)
            if loop.is_closed():
                return


class _LoopThread:
    """One long-lived event loop in a daemon thread that runs every judge call.

    litellm keeps loop-bound state (its logging worker, HTTP clients): used from several loops
    (the engine's, ``asyncio.run`` per sync score, a test's) it hops between them, warns, and
    orphans tasks. So whichever loop a scorer is awaited on, its judge calls run here, and sync
    callers (CLI, tests, ``score()``) block on this loop too, inside a running loop or not.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._atexit = False
        # A fork while another thread was starting the loop would leave the child's lock held.
        _fork.register(after_in_child=self._reinit_lock)

    def _reinit_lock(self) -> None:
        self._lock = threading.Lock()

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # after fork the thread is gone in the child: start a new one
            if self._loop is None or self._pid != os.getpid() or not (self._thread and self._thread.is_alive()):
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_serve, args=(loop,), name="otel-toolscore-judge", daemon=True)
                thread.start()
                if not self._atexit:
                    atexit.register(self.close)
                    self._atexit = True
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def close(self, timeout: float = 2.0) -> None:
        """Cancel what still runs on the loop (litellm's logging worker) and stop it, so the
        interpreter does not exit with "Task was destroyed but it is pending!" on stderr."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None or not thread.is_alive() or self._pid != os.getpid():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if not thread.is_alive():
            loop.close()


_RUNNER = _LoopThread()


async def on_judge_loop(coro: Coroutine[Any, Any, Any]) -> Any:
    """Await ``coro`` on the judge loop from whatever loop the caller is on. Cancelling the
    caller cancels the work there too."""
    loop = _RUNNER.loop()
    if asyncio.get_running_loop() is loop:
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine to completion from sync code (inside a running loop or not) on the judge
    loop. Not from a coroutine already on the judge loop: await it there instead."""
    loop = _RUNNER.loop()
    if _RUNNER.in_loop_thread():
        coro.close()
        raise RuntimeError("run_sync called on the judge loop itself (it would deadlock): await ascore instead")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


class Inflight:
    """Runs submitted to the judge loop, at most ``max_inflight`` at a time (the engine's)."""

    def __init__(self, max_inflight: int) -> None:
        self._max = max_inflight
        self._inflight = 0
        self._lock = threading.Condition()
        self._closing = False
        self._futures: set[Future[None]] = set()

    def submit(self, coro: Any, on_cancel: Callable[[], None] | None = None) -> bool:
        with self._lock:
            if self._inflight >= self._max or self._closing:
                coro.close()
                return False
            self._inflight += 1
        fut = asyncio.run_coroutine_threadsafe(coro, _RUNNER.loop())
        with self._lock:
            self._futures.add(fut)
        fut.add_done_callback(lambda f: self._done(f, on_cancel))
        return True

    def _done(self, fut: Future[None], on_cancel: Callable[[], None] | None = None) -> None:
        if fut.cancelled() and on_cancel is not None:
            try:
                on_cancel()  # cancelled at shutdown: the run was dropped, and is counted so
            except Exception:
                logger.debug("on_cancel failed", exc_info=True)
        if not fut.cancelled() and fut.exception() is not None:
            logger.warning("otel-toolscore judge run failed", exc_info=fut.exception())
        with self._lock:
            self._inflight -= 1
            self._futures.discard(fut)
            self._lock.notify_all()

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._inflight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._lock.wait(remaining)
        return True

    def close(self, timeout_s: float) -> None:
        """Wait for the runs in flight, then cancel what is left. The loop itself stays: other
        engines and sync callers share it (it is closed at exit)."""
        if not _RUNNER.in_loop_thread():  # shut down from a judge's callback: it cannot wait for itself
            self.wait(timeout_s)
        with self._lock:
            self._closing = True
            pending = list(self._futures)
        for fut in pending:  # a judge that never answers must not keep the app from exiting
            fut.cancel()


#: the longest a fork waits for other threads to finish an import or a pydantic model build
_FORK_WAIT_S = 15.0
_IMPORTLIB = "<frozen importlib"
_OWN_CODE = ("otel_toolscore", "litellm")


def _unsafe_to_fork(frame: FrameType | None) -> bool:
    """Whether a thread is inside an import, or a pydantic model build, that this package or
    litellm started (their stacks hold a frame of either)."""
    busy = ours = False
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        if name.startswith(_IMPORTLIB) or (code.co_name == "model_rebuild" and "pydantic" in name):
            busy = True
        elif any(part in name for part in _OWN_CODE):
            ours = True
        if busy and ours:
            return True
        frame = frame.f_back
    return False


class _ForkFence:
    """Forks wait until the judges' threads hold no module-level lock (bounded).

    The first judgement imports litellm (seconds) on a background thread; litellm imports its
    provider modules and builds its pydantic models on first use, on its executor's threads. A
    fork in the middle of one leaves the child with that module's import lock, or pydantic's
    global rebuild lock, held by a thread the child does not have: the child's own judges
    would wait on it forever. So before a fork: take pydantic's rebuild lock and the
    interpreter's import lock (no thread can start an import while it is held) at a moment when
    no thread is inside an import or a model build that this package or litellm started, and
    hold both across the fork. A judge only waiting on an HTTP answer does not delay a fork.
    """

    def __init__(self) -> None:
        self._rebuild: Any = None
        self._imp = False

    def before(self) -> None:
        import _imp

        rebuild = getattr(sys.modules.get("pydantic.main"), "_rebuild_lock", None)
        deadline = time.monotonic() + _FORK_WAIT_S
        while True:
            self._settle_lazy_values()  # (with no lock held: the thread computing them may need one)
            # Never wait on one lock while holding the other: the thread holding it may need it.
            if rebuild is None or rebuild.acquire(blocking=False):
                _imp.acquire_lock()
                if not self._busy():
                    self._rebuild, self._imp = rebuild, True
                    return
                _imp.release_lock()
                if rebuild is not None:
                    rebuild.release()
            if time.monotonic() >= deadline:
                logger.warning("otel-toolscore: forking while a judge thread imports a module; the child's "
                               "judges may hang (until their timeout)")
                return
            time.sleep(0.005)

    @staticmethod
    def _settle_lazy_values() -> None:
        """Values the judges' HTTP stack computes once, under a lock, on first use (the openai
        SDK's platform headers: ``platform.platform()``, ``distro.id()``, cached properties that
        run ``uname``). Asking for them here waits for a thread computing them, or computes
        them, so that no fork happens while their lock is held."""
        if "openai" not in sys.modules:
            return
        try:
            import platform

            platform.platform()
            distro = sys.modules.get("distro")
            if distro is not None:
                distro.id()
        except Exception:  # only a precaution
            logger.debug("otel-toolscore: settling platform values before fork failed", exc_info=True)

    @staticmethod
    def _busy() -> bool:
        current = threading.get_ident()
        return any(ident != current and _unsafe_to_fork(frame) for ident, frame in sys._current_frames().items())

    def after(self) -> None:
        # In the child as in the parent the forking thread owns both (the child re-creates the
        # import lock, still held by this thread, before it runs these hooks).
        import _imp

        rebuild, imp = self._rebuild, self._imp
        self._rebuild, self._imp = None, False
        if imp:
            _imp.release_lock()
        if rebuild is not None:
            rebuild.release()


_FENCE = _ForkFence()
_fork.register(before=_FENCE.before, after_in_parent=_FENCE.after, after_in_child=_FENCE.after)
