"""``pylibbpf trace --format arrow -o FILE|-``: the events as an Arrow IPC stream.

One RecordBatch per drained batch (ring buffer or ordered merge: the reader's
own batches; the consumers that call back per event: what arrived since the
last tick, every 0.2 s), with the schema of :meth:`pylibbpf.Batch.to_arrow`
(``--ordered`` adds the merge's ``timestamp``, ``late`` and ``cpu`` columns).
The stream stays readable whatever ends the trace: Ctrl-C and SIGTERM are
held back while a batch is being written (and delivered right after), and the
end-of-stream marker is written when the trace stops.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, BinaryIO

from .._arrow import pyarrow, record_batch
from .._batch import Batch, OrderedBatch
from ..events import EventDef
from ._common import CommandError, pipe_broken, point_at_devnull, signals_held


def open_output(path: str) -> BinaryIO:
    """``-`` (stdout, which must not be a terminal) or a file created or truncated for writing."""
    if path == "-":
        if os.isatty(1):
            raise CommandError("--format arrow writes binary data: redirect stdout or give -o FILE")
        return os.fdopen(os.dup(1), "wb")
    try:
        return open(path, "wb")
    except OSError as e:
        raise CommandError(f"cannot write {path}: {e.strerror}") from e


class ArrowWriter:
    """The trace's output for ``--format arrow``: batches in, an Arrow IPC stream out.

    Takes whole batches (``write_batch``) or single events (``__call__``, from a
    consumer's thread; kept until ``flush``). Writes happen in the calling
    thread of ``write_batch``/``flush``/``close``. When the stream's reader goes
    away (a closed pipe), ``closed`` is set and nothing more is written.
    """

    def __init__(self, event: EventDef, out: BinaryIO, *, ordered: bool) -> None:
        try:
            pa = pyarrow("--format arrow")
        except ImportError as e:
            raise CommandError(str(e)) from e
        self._event = event
        self._out = out
        self._pending: list[bytes] = []
        self._lock = threading.Lock()
        self.count = 0
        self.closed = threading.Event()
        #: Why the stream could not be written (not a closed pipe: that is ``closed`` alone).
        self.error: OSError | None = None
        empty = OrderedBatch.empty() if ordered else Batch.empty()
        self._schema = empty.to_arrow(event).schema
        self._writer: Any = None
        with signals_held():
            self._writer = self._guard(lambda: pa.ipc.new_stream(out, self._schema))

    def header(self) -> None:
        """Nothing: the schema went out when the stream was opened."""

    def __call__(self, data: Any) -> None:
        """Keep one event (bytes or memoryview of the event struct) for the next ``flush``."""
        with self._lock:
            self._pending.append(bytes(data[: self._event.size]))

    def write_batch(self, batch: Batch) -> None:
        """Write a reader's batch as one RecordBatch (nothing for an empty batch)."""
        if len(batch):
            self._write(batch.to_arrow(self._event))

    def flush(self) -> None:
        """Write the events kept since the last flush as one RecordBatch, and push the output."""
        with self._lock:
            pending, self._pending = self._pending, []
        if pending:
            self._write(record_batch(self._event.parse_many(b"".join(pending)), self._event))
        with signals_held():
            self._guard(self._out.flush)

    def reader_gone(self) -> bool:
        """True once the output's reader has gone (a write failed or the pipe reports an error)."""
        if not self.closed.is_set() and pipe_broken(self._out):  # type: ignore[arg-type]
            self._reader_gone()
        return self.closed.is_set()

    def close(self) -> None:
        """Write what is kept, the end-of-stream marker, and close the output. Idempotent."""
        if self._writer is None:
            if self.error is not None:  # the stream never started: only the file is left to close
                with contextlib.suppress(OSError):
                    self._out.close()
            return
        with signals_held():   # a second Ctrl-C here still gets a complete stream
            self.flush()
            writer, self._writer = self._writer, None
            self._guard(writer.close)
            self._guard(self._out.flush)  # the end of the stream: a failed write is reported, not lost
            with contextlib.suppress(OSError):   # after a broken pipe: the fd points at /dev/null
                self._out.close()

    def _write(self, rb: Any) -> None:
        if rb.schema != self._schema:   # the same conversion made both: a mismatch is a bug here
            raise RuntimeError(f"--format arrow: batch schema {rb.schema} differs from the stream's")
        with signals_held():
            self._guard(lambda: self._writer.write_batch(rb))
        self.count += rb.num_rows

    def _guard(self, write: Any) -> Any:
        if self.closed.is_set():
            return None
        try:
            return write()
        except BrokenPipeError:
            self._reader_gone()
        except OSError as e:   # pyarrow raises its own OSError for a failed Python-file write
            if isinstance(e.__context__, BrokenPipeError) or "Broken pipe" in str(e):
                self._reader_gone()
            else:  # a full disk, /dev/full: nothing more is written; the command reports ``error``
                self.error = e
                self._reader_gone()
        return None

    def _reader_gone(self) -> None:
        self.closed.set()
        point_at_devnull(self._out)  # type: ignore[arg-type]
