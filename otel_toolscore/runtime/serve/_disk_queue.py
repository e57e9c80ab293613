"""``serve --queue-dir``: accepted trace requests kept on disk until every span in them is delivered.

SQLite (the standard library's), WAL mode, ``synchronous=FULL``: a request is committed before
it is acknowledged, so a kill -9 (or a power loss) loses nothing that was answered 200. Three
tables:

``requests``   each accepted request as it came (its bytes), removed once all its spans are delivered
``delivered``  spans of requests still on disk that were delivered (a restart skips them: none twice)
``scored``     traces whose scored agent span or evaluation span was delivered (a restart does not score them again)

On start, what is on disk is handed to the pipeline again, before anything new is accepted.
The size is bounded (``max_bytes`` of request bodies): a request that does not fit is pushed
back (503); what a restart finds over a smaller bound is dropped oldest first, and counted.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DiskQueue", "Stored"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY AUTOINCREMENT, body BLOB NOT NULL,
                                     is_json INTEGER NOT NULL, spans INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS delivered (request_id INTEGER NOT NULL, trace_id BLOB NOT NULL, span_id BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS delivered_by_request ON delivered (request_id);
CREATE TABLE IF NOT EXISTS scored (trace_id BLOB PRIMARY KEY, at REAL NOT NULL);
"""
#: s; how long a scored trace is remembered (a restart replays nothing older than its queue)
SCORED_KEPT_S = 7 * 24 * 3600.0


def _key(trace_id: int, span_id: int) -> tuple[bytes, bytes]:
    return trace_id.to_bytes(16, "big"), span_id.to_bytes(8, "big")


@dataclass(frozen=True)
class Stored:
    """A request on disk, as a restart hands it on."""

    id: int
    body: bytes
    is_json: bool
    #: (trace id, span id) of its spans already delivered
    delivered: frozenset[tuple[int, int]]


class DiskQueue:
    """The on-disk queue of one ``serve``; thread-safe (one connection behind a lock)."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, not {max_bytes}")
        self.path = Path(directory) / "serve-queue.sqlite3"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # committed = on disk, before the 200
        self._db.executescript(_SCHEMA)
        self._bytes = int(self._db.execute("SELECT COALESCE(SUM(LENGTH(body)), 0) FROM requests").fetchone()[0])
        self._db.execute("DELETE FROM scored WHERE at < ?", (time.time() - SCORED_KEPT_S,))

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def fits(self, n_bytes: int) -> bool:
        with self._lock:
            return self._bytes + n_bytes <= self.max_bytes

    def append(self, body: bytes, is_json: bool, spans: int) -> int | None:
        """Store a request durably; its id, or None when it does not fit (push back)."""
        with self._lock:
            if self._bytes + len(body) > self.max_bytes:
                return None
            cursor = self._db.execute("INSERT INTO requests (body, is_json, spans) VALUES (?, ?, ?)",
                                      (body, int(is_json), spans))
            self._bytes += len(body)
            return int(cursor.lastrowid or 0)

    def trim_to_bound(self) -> tuple[int, int]:
        """Drop the oldest requests until what is stored fits ``max_bytes``; (requests, spans) dropped."""
        dropped = spans = 0
        with self._lock:
            while self._bytes > self.max_bytes:
                row = self._db.execute("SELECT id, LENGTH(body), spans FROM requests ORDER BY id LIMIT 1").fetchone()
                if row is None:
                    break
                self._db.execute("BEGIN")
                self._db.execute("DELETE FROM delivered WHERE request_id = ?", (row[0],))
                self._db.execute("DELETE FROM requests WHERE id = ?", (row[0],))
                self._db.execute("COMMIT")
                self._bytes -= row[1]
                dropped += 1
                spans += row[2]
        return dropped, spans

    def stored(self) -> Iterator[Stored]:
        """What is on disk, oldest first."""
        with self._lock:
            ids = [row[0] for row in self._db.execute("SELECT id FROM requests ORDER BY id")]
        for request_id in ids:
            with self._lock:
                row = self._db.execute("SELECT body, is_json FROM requests WHERE id = ?", (request_id,)).fetchone()
                done = self._db.execute("SELECT trace_id, span_id FROM delivered WHERE request_id = ?",
                                        (request_id,)).fetchall()
            if row is not None:
                yield Stored(request_id, bytes(row[0]), bool(row[1]),
                             frozenset((int.from_bytes(t, "big"), int.from_bytes(s, "big")) for t, s in done))

    def delivered(self, spans: Iterable[tuple[int, int, int]], finished: Iterable[int]) -> None:
        """Record delivered spans ((request id, trace id, span id)) and remove the requests all of
        whose spans are delivered, in one transaction."""
        finished = list(finished)
        rows = [(rid, *_key(t, s)) for rid, t, s in spans if rid not in finished]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT INTO delivered VALUES (?, ?, ?)", rows)
                freed = 0
                for rid in finished:
                    size = self._db.execute("SELECT LENGTH(body) FROM requests WHERE id = ?", (rid,)).fetchone()
                    freed += size[0] if size else 0
                    self._db.execute("DELETE FROM delivered WHERE request_id = ?", (rid,))
                    self._db.execute("DELETE FROM requests WHERE id = ?", (rid,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._bytes -= freed

    def mark_scored(self, trace_ids: Iterable[int]) -> None:
        now = time.time()
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO scored VALUES (?, ?)",
                                 [(t.to_bytes(16, "big"), now) for t in trace_ids])

    def scored(self, trace_id: int) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM scored WHERE trace_id = ?",
                                    (trace_id.to_bytes(16, "big"),)).fetchone() is not None

    def close(self) -> None:
        with self._lock:
            self._db.close()
