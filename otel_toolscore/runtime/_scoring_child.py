"""The scoring process's own side (``scoring="process"``): read runs, score them, answer.

Started by ``_scoring_process.ScoringProcess`` as ``python -m otel_toolscore.runtime._scoring_child
READ_FD WRITE_FD``: a fresh interpreter that imports this package and nothing of the app (not its
``__main__``, which a multiprocessing "spawn" child would run again). The first message is the
spec: the parent's ``sys.path``, the settings and the code scorers; the child answers ``ready``
(or why it cannot start), then scores each batch of runs with ``engine.score_spans``, the
function the processor's worker thread calls in thread mode, so the scores are the same, and
prepares what they emit (``outputs._prepare``) as the worker thread does, so that the app only
makes the SDK calls.

Answers go back per batch, and sooner when a batch takes long (``_ANSWER_WITHIN_S``), so that a
held agent span does not wait for the runs queued behind its own. The child ends when the
parent closes the pipe (or dies: the pipe closes with it).
"""

from __future__ import annotations

import pickle
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from otel_toolscore.outputs._prepare import Preparer
from otel_toolscore.runtime import _handoff
from otel_toolscore.runtime._own_process import tune_gc
from otel_toolscore.runtime.engine import score_spans

#: s; an answer waits at most this long for the rest of its batch before it is sent
_ANSWER_WITHIN_S = 0.005


def _serve(recv: Callable[[], bytes], send: Callable[[bytes], None]) -> None:
    try:
        path, spec = pickle.loads(recv())  # our own parent, on a private pipe
        sys.path[:] = path  # the scorers' modules import from where the app's do
        settings, code_scorers = pickle.loads(spec)
        prepare = Preparer(settings).prepare
    except EOFError:
        return
    except BaseException:  # noqa: BLE001 - the parent is told why, whatever it was
        send(b"failed:" + traceback.format_exc().encode("utf-8", "replace"))
        return
    tune_gc()
    send(b"ready")
    while True:
        try:
            message = recv()
        except (EOFError, OSError):
            return
        answers: list[tuple[Any, ...]] = []
        first_pending = 0.0
        for request in _handoff.decode_runs(message):
            try:
                results, already_scored = score_spans(request.spans, code_scorers, settings)
                answer = _handoff.answer_ok(request.seq, results, already_scored, request.want_trajectory, prepare)
            except BaseException as exc:  # noqa: BLE001 - one run's failure is its answer, as on the worker thread
                answer = _handoff.answer_failed(request.seq, f"{type(exc).__name__}: {exc}")
            if not answers:
                first_pending = time.monotonic()
            answers.append(answer)
            if time.monotonic() - first_pending >= _ANSWER_WITHIN_S:
                send(_handoff.encode_answers(answers))
                answers = []
        if answers:
            send(_handoff.encode_answers(answers))


def main(argv: list[str]) -> int:
    # Ctrl-C in the app's terminal reaches the whole process group: the app decides when
    # scoring stops (shutdown closes the pipe), not the signal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    read_fd, write_fd = int(argv[0]), int(argv[1])
    requests, answers = _handoff.Pipe(read_fd), _handoff.Pipe(write_fd)
    # Scoring runs off the main thread, as on the processor's worker thread: a scorer raising
    # SystemExit or KeyboardInterrupt is then its error score there and here alike
    # (``scorers.run.score_one``), not the end of the process.
    worker = threading.Thread(target=_serve, args=(requests.recv, answers.send), name="otel-toolscore-scoring", daemon=True)
    worker.start()
    worker.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
