"""Writing a blob past the page cache: ``O_DIRECT`` batches from a thread of the writer's own.

Recording a large body through the page cache costs a fresh page per 4 KiB, which on some
machines (VMs whose freed memory goes back to the host) is most of what storing costs.
:class:`DirectWrites` copies chunks into a few reused, page-aligned buffers and lets a thread
hash each full buffer (BLAKE3 releases the GIL) and write it with one ``pwrite`` on an
``O_DIRECT`` file descriptor, which the disk reads straight from the buffer. Used by
:class:`~fetchproxy.store.disk.DiskBlobWriter` for the bytes of a blob past its first
``DIRECT_BATCH``; docs/store.md has the measurements.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import queue
import threading
import weakref
from dataclasses import dataclass

import blake3

DIRECT_BATCH = 1 << 20
"""Bytes per ``O_DIRECT`` write; a blob goes direct once it has this many (see docs/store.md)."""
DIRECT_BUFFERS = 3
"""Batches one writer may have in flight before ``update()`` waits for the disk."""
ALIGN = 4096
"""What ``O_DIRECT`` offsets, lengths and buffers are aligned to: a multiple of any block size."""


def set_direct(fd: int, *, on: bool) -> bool:
    """Turn ``O_DIRECT`` on or off for ``fd``; ``False`` if the file system refuses."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT if on else flags & ~os.O_DIRECT)
    except OSError:
        return False
    return True


def _is_direct(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``.

    A direct write the file system refuses (``EINVAL``: it wants other
    alignments) switches the file to the page cache and is written again.
    """
    while data:
        try:
            done = os.pwrite(fd, data, offset)
        except OSError as exc:
            if exc.errno != errno.EINVAL or not _is_direct(fd) or not set_direct(fd, on=False):
                raise
            continue
        data = data[done:]
        offset += done


@dataclass(frozen=True)
class _Batch:
    """A full buffer for the write thread: hash ``buffer[hash_from:size]``, write ``[:size]``."""

    buffer: mmap.mmap
    size: int
    offset: int
    hash_from: int


def _write_batches(
    fd: int,
    hasher: blake3.blake3,
    todo: queue.SimpleQueue[_Batch | None],
    done: queue.SimpleQueue[tuple[mmap.mmap, OSError | None]],
) -> None:
    """The write thread: hash and write each batch in order, hand its buffer back.

    After an error it only hands buffers back, with the error, until told to stop.
    """
    error: OSError | None = None
    while (batch := todo.get()) is not None:
        if error is None:
            try:
                with memoryview(batch.buffer) as view:
                    hasher.update(view[batch.hash_from : batch.size])
                    _pwrite_all(fd, view[: batch.size], batch.offset)
            except OSError as exc:
                error = exc
        done.put((batch.buffer, error))


class DirectWrites:
    """A temp file's bytes from ``offset`` on, hashed and written past the page cache.

    ``write()`` only copies: chunks fill page-aligned buffers of ``DIRECT_BATCH``
    bytes (anonymous mmaps, reused), and a thread of this writer's own hashes each
    full one (BLAKE3 releases the GIL) and writes it with one ``pwrite`` on the
    ``O_DIRECT`` file, which the disk reads straight from the buffer: no page-cache
    page is allocated. With ``DIRECT_BUFFERS`` batches in flight ``write()`` waits
    for one, as a blocking ``write`` would. ``finish()`` hashes and writes the last,
    partial batch itself, through the page cache (``O_DIRECT`` wants whole blocks).
    The first ``hash_from`` bytes written are not hashed: they were already.
    """

    def __init__(self, fd: int, offset: int, hasher: blake3.blake3, *, hash_from: int) -> None:
        self._fd = fd
        self._hasher = hasher
        self._offset = offset
        """Where the batch being filled goes in the file."""
        self._hash_from = hash_from
        self._buffers = [mmap.mmap(-1, DIRECT_BATCH)]
        self._batch = self._buffers[0]
        self._fill = 0
        self._spare: list[mmap.mmap] = []
        self._in_flight = 0
        self._todo: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[mmap.mmap, OSError | None]] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=_write_batches,
            args=(fd, hasher, self._todo, self._done),
            name="fetchproxy-store-write",
            daemon=True,
        )
        self._thread.start()
        # A writer dropped without commit or abort must not leave its thread waiting forever.
        self._stop = weakref.finalize(self, self._todo.put, None)

    def write(self, chunk: bytes) -> None:
        """Copy ``chunk`` in; raises the ``OSError`` of a batch written meanwhile, if any."""
        view = memoryview(chunk)
        while view:
            size = min(len(view), DIRECT_BATCH - self._fill)
            self._batch[self._fill : self._fill + size] = view[:size]
            self._fill += size
            view = view[size:]
            if self._fill == DIRECT_BATCH:
                self._submit()

    def finish(self) -> None:
        """Hash and write everything, then free the buffers; raises the first ``OSError``."""
        try:
            while self._in_flight:
                self._reap(block=True)
            if self._fill:
                with memoryview(self._batch) as view:
                    self._hasher.update(view[self._hash_from : self._fill])
                    set_direct(self._fd, on=False)
                    _pwrite_all(self._fd, view[: self._fill], self._offset)
        finally:
            self.close()

    def close(self) -> None:
        """Stop the thread once it is done with the batches in flight, free the buffers."""
        self._stop()
        self._thread.join()
        # unmapped when the last view of them goes (an error's traceback may hold one a while)
        self._buffers.clear()
        self._spare.clear()

    def _submit(self) -> None:
        self._todo.put(_Batch(self._batch, DIRECT_BATCH, self._offset, self._hash_from))
        self._in_flight += 1
        self._offset += DIRECT_BATCH
        self._fill = self._hash_from = 0
        while self._in_flight and self._reap(block=False):
            pass
        if not self._spare:
            if len(self._buffers) < DIRECT_BUFFERS:
                self._buffers.append(mmap.mmap(-1, DIRECT_BATCH))
                self._spare.append(self._buffers[-1])
            else:
                self._reap(block=True)
        self._batch = self._spare.pop()

    def _reap(self, *, block: bool) -> bool:
        """Take back a buffer the thread is done with; whether there was one."""
        try:
            buffer, error = self._done.get(block=block)
        except queue.Empty:
            return False
        self._in_flight -= 1
        self._spare.append(buffer)
        if error is not None:
            raise error
        return True
