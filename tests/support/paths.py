"""Where the tests' inputs are, in one place. Everything is inside the repository: the fixture
traces of every instrumentation stack and the real-conversation corpora are committed compressed
in ``tests/corpora/*.tar.xz`` (``scripts/refresh-corpora`` re-copies them from the shared folder
they come from) and extracted once, when this module is first imported, into
``tests/corpora/extracted/`` (ignored by git; re-extracted when an archive changes).
``FIXTURES`` and ``REALWORLD`` have the layout and file names of the original folders
(``fixtures/traces``, ``realworld``); ``load_json`` reads a JSON file, gzipped or not."""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import lzma
import os
import shutil
import tarfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
#: the apps and clients that tests run in a process of their own
DATA = TESTS / "data"
EXAMPLES = REPO / "examples"
#: the bundled example traces (OTLP JSON, one request per line)
SAMPLE = EXAMPLES / "traces" / "sample.jsonl"
#: this repository's own captures (``tests/conformance/generator.py``), one folder per stack
CAPTURES = TESTS / "conformance" / "captures"

#: the committed archives (one per corpus) and where they are extracted
CORPORA = TESTS / "corpora"
EXTRACTED = CORPORA / "extracted"


def _extract(archive: Path) -> None:
    """Extract ``archive`` into ``EXTRACTED`` unless its stamp says it already is. Members named
    ``*.gz`` are stored decompressed (see scripts/refresh-corpora) and gzipped here. A stamp
    (the archive's digest, then the files it wrote) is written last, under a lock, so that a
    process seeing it sees every file."""
    stamp = EXTRACTED / f".{archive.name}.stamp"
    data = archive.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if stamp.is_file() and stamp.read_text().split("\n", 1)[0] == digest:
        return
    EXTRACTED.mkdir(parents=True, exist_ok=True)
    with open(EXTRACTED / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        previous = stamp.read_text().split("\n") if stamp.is_file() else [""]
        if previous[0] == digest:
            return
        for name in previous[1:]:  # what the archive's previous version wrote
            if name:
                (EXTRACTED / name).unlink(missing_ok=True)
        written = []
        with tarfile.open(fileobj=lzma.LZMAFile(archive), mode="r|") as tar:
            for member in tar:
                if not member.isfile() or member.name.startswith("/") or ".." in member.name.split("/"):
                    continue
                source = tar.extractfile(member)
                assert source is not None
                content = source.read()
                if member.name.endswith(".gz"):
                    content = gzip.compress(content, compresslevel=1, mtime=0)
                target = EXTRACTED / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f".{target.name}.{os.getpid()}")
                partial.write_bytes(content)
                partial.replace(target)
                written.append(member.name)
        partial = stamp.with_name(f"{stamp.name}.{os.getpid()}")
        partial.write_text("\n".join([digest, *written]) + "\n")
        partial.replace(stamp)


def extract_corpora() -> None:
    """Extract every committed corpus that is not extracted yet (fast when all are)."""
    for archive in sorted(CORPORA.glob("*.tar.xz")):
        _extract(archive)


def clear_extracted() -> None:
    """Remove the extracted copy (the next import extracts again)."""
    shutil.rmtree(EXTRACTED, ignore_errors=True)


extract_corpora()

#: one folder per instrumentation stack, ``labels.json`` and the README beside them
FIXTURES = EXTRACTED / "fixtures" / "traces"
#: the real conversations (``tau_airline/``, ``tau2_telecom/``, ``tau2_airline/``), their truth,
#: mutation and tool-schema files, as described by ``REALWORLD / "README.md"``
REALWORLD = EXTRACTED / "realworld"


def open_text(path: Path) -> str:
    """A text file's content, gunzipped when its name ends in ``.gz``."""
    data = path.read_bytes()
    return (gzip.decompress(data) if path.name.endswith(".gz") else data).decode()


def load_json(path: Path) -> Any:
    """A JSON file's content; ``path`` may name ``x.json`` or ``x.json.gz``, and when ``x.json``
    is not there but ``x.json.gz`` is, that is read."""
    if not path.exists() and path.with_name(path.name + ".gz").exists():
        path = path.with_name(path.name + ".gz")
    return json.loads(open_text(path))


def traces(corpus: Path, pattern: str = "*/*.json") -> list[Path]:
    """A corpus's trace files (``FIXTURES`` or ``CAPTURES``), sorted, so that parametrized ids
    keep their order. A stack's ``pending.json`` (what its captures still lack, for the
    conformance test) is not a trace."""
    return sorted(p for p in corpus.glob(pattern) if p.name != "pending.json")


def trace_id(path: Path) -> str:
    """A trace file's test id: ``<stack>/<scenario>``."""
    return f"{path.parent.name}/{path.stem}"
