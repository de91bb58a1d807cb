"""Decode (and preprocess) images in worker processes, ahead of the model, in order.

Every path that embeds images (index builds, query encoding, X^R, the server) used to decode and
preprocess one image at a time in the process that runs the model; on a GPU that is the bound (one
core decodes and resizes a COCO photo in ~3-14 ms, a GPU embeds >1,000 images/s). A
:class:`DecodePool` runs :func:`unirag.data.images.load_rgb` and the encoder's CPU preprocessing
(``encoder.image_preprocessor()``) in ``workers`` processes and keeps a bounded number of jobs
(batches) in flight, so the model takes ready batches while the workers decode the next ones.

* Order is kept: :meth:`DecodePool.map` yields jobs in the order they came in, and each job's
  images in its order, whatever the worker that decoded them.
* Bad images are not raised in the worker: each item is a :class:`Decoded` with either the image or
  the reason it could not be read, so callers skip-and-report (index builds) or raise (queries)
  exactly as when decoding inline.
* ``workers=0`` decodes inline, lazily, in the calling process (what unirag did before).

Workers are forked on Linux, as torch's DataLoader workers are: a forked worker starts at once and
inherits the preprocessor (nothing is pickled), and a script that calls unirag at top level, without
an ``if __name__ == "__main__":`` guard, still works. Workers decode with PIL and preprocess with
numpy/PIL; like DataLoader workers they run single-threaded (``torch.set_num_threads(1)``,
``OMP_NUM_THREADS=1``) and never touch the GPU. Elsewhere (macOS, Windows) they are spawned, which
needs the ``__main__`` guard and a picklable preprocessor (an unpicklable one runs in the caller).

Preprocessed arrays do not travel through a pipe. Once the first job shows what the preprocessor
returns (arrays of one shape and dtype), the pool makes a ring of batch-shaped slots in shared memory
(:class:`SlotRing`, ``multiprocessing.shared_memory``; as many slots as jobs can be in flight), and
each worker writes every image it preprocesses straight into its row of its job's slot. The caller
gets the job's rows as views into the slot (no unpickling, no copy), :func:`stack_batch` hands the
model those rows as one batch without stacking them again, and the slot is recycled when the caller
asks for the next job. Anything else a preprocessor returns (a dict, a PIL image, an array of
another shape) goes back pickled, as before. The segments are unlinked when the pool is closed, when
it is garbage collected and at interpreter exit (an exception or Ctrl-C included); a parent killed
outright leaves them to ``multiprocessing``'s resource tracker, which unlinks them when the last
worker is gone.
"""

from __future__ import annotations

import os
import pickle
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from unirag.errors import ConfigError, InputError

K = TypeVar("K")

#: ``--decode-workers auto`` uses the cores this process may run on, at most this many.
AUTO_WORKERS_CAP = 8
#: With ``auto``, fewer images than this are decoded inline: starting worker processes costs more.
AUTO_MIN_IMAGES = 128
#: Shared-memory segment names start with this and the creating process id (tests look for leaks).
SHM_PREFIX = "unirag_dec_"
#: The slot ring is made only if the shared-memory file system keeps this fraction free afterwards
#: (a container's 64 MB ``/dev/shm`` would otherwise end a worker with SIGBUS mid-write).
SHM_HEADROOM = 0.25


@dataclass(frozen=True)
class Decoded:
    """One image of a job: ``image`` (a PIL image, or the preprocessor's array) or why it is unreadable."""

    path: str
    image: Any = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    def unwrap(self) -> Any:
        """The image, or the :class:`InputError` the inline decoder raises for this file."""
        if self.reason is not None:
            raise InputError(self.reason, path=self.path)
        return self.image


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def resolve_decode_workers(value: int | str | None) -> int | None:
    """``None``/``"auto"`` -> None (auto: :func:`auto_decode_workers`); an integer >= 0 -> itself."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"decode workers must be 'auto' or an integer >= 0, got {value!r}") from None
    if n < 0:
        raise ConfigError(f"decode workers must be >= 0 (0 = decode inline), got {n}")
    return n


def auto_decode_workers() -> int:
    """The ``auto`` number of decode workers: the cores available, at most :data:`AUTO_WORKERS_CAP`."""
    return min(available_cores(), AUTO_WORKERS_CAP)


#: With ``auto``, decode workers when the model itself runs on the CPU: its intra-op threads already
#: use every core, and decoding is a few per cent of its work. Measured on 2 cores (docs/throughput.md):
#: one worker overlaps the decoding; two competed with the model's threads and were slower.
AUTO_WORKERS_CPU_MODEL = 1


def workers_for(setting: int | None, n_images: int | None, model_on_cpu: bool = False) -> int:
    """Workers to use for a job of ``n_images`` (None: unknown, e.g. a streamed pool) under ``setting``.

    An explicit setting is used as is; ``auto`` decodes small jobs inline (:data:`AUTO_MIN_IMAGES`)
    and, for a model that runs on the CPU, uses :data:`AUTO_WORKERS_CPU_MODEL` workers.
    """
    if setting is not None:
        return setting
    if n_images is not None and n_images < AUTO_MIN_IMAGES:
        return 0
    if model_on_cpu:
        return min(AUTO_WORKERS_CPU_MODEL, auto_decode_workers())
    return auto_decode_workers()


def preprocessed(preprocess: Callable[[Any], Any], image: Any) -> Any:
    """``preprocess(image)``, a numpy result made C-contiguous: a batch stacked from views (a
    transposed HWC array) would otherwise keep their layout, and reductions over it sum in another
    order than over the copies a worker sends back - the vectors must not depend on where it ran."""
    out = preprocess(image)
    if type(out).__module__ == "numpy":
        import numpy as np

        out = np.ascontiguousarray(out)
    return out


def decode_one(path: str | Path, preprocess: Callable[[Any], Any] | None = None) -> Decoded:
    """Decode one file with :func:`unirag.data.images.load_rgb` and apply ``preprocess``."""
    from unirag.data import images

    try:
        image = images.load_rgb(path)
    except InputError as e:
        return Decoded(str(path), None, e.reason)
    return Decoded(str(path), preprocessed(preprocess, image) if preprocess is not None else image)


# -- worker side ---------------------------------------------------------------------------------
_WORKER_PREPROCESS: Callable[[Any], Any] | None = None


def start_method() -> str:
    """``fork`` where the platform has it safely (Linux), else ``spawn`` (see the module docstring)."""
    import sys

    return "fork" if sys.platform.startswith("linux") else "spawn"


def _exit_with_parent(poll_seconds: float = 1.0) -> None:
    """End this worker when the process that started it is gone (killed mid-build): a forked worker
    holds copies of the pool's pipes, so it would otherwise wait on them forever (DataLoader workers
    watch their parent the same way)."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        import time

        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(0)

    threading.Thread(target=watch, name="unirag-decode-watchdog", daemon=True).start()


def _init_worker(preprocess: Any, pickled: bool) -> None:
    """Single-threaded numerics (the parallelism is the processes), then the preprocessor (unpickled
    here when spawned, so that the thread settings come first)."""
    global _WORKER_PREPROCESS
    import signal

    # Ctrl-C is the parent's to handle: it stops submitting, lets the running pieces finish (their
    # slots are then unlinked) and shuts the workers down, as DataLoader workers leave it to theirs.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    _WORKER_PREPROCESS = pickle.loads(preprocess) if pickled and preprocess is not None else preprocess
    import sys

    torch = sys.modules.get("torch")  # imported by unpickling a torch-based preprocessor
    if torch is not None:
        torch.set_num_threads(1)


class _InSlot:
    """Stands for an image a worker wrote into its row of the job's shared-memory slot."""


#: this worker's attached slots: segment name -> (SharedMemory, its batch-shaped array)
_WORKER_SLOTS: dict[str, tuple[Any, Any]] = {}


def _slot_array(name: str, rows: int, shape: tuple[int, ...], dtype: str):
    got = _WORKER_SLOTS.get(name)
    if got is None:
        from multiprocessing import shared_memory

        import numpy as np

        segment = shared_memory.SharedMemory(name=name)
        got = _WORKER_SLOTS[name] = (segment, np.ndarray((rows, *shape), np.dtype(dtype), buffer=segment.buf))
    return got[1]


def _decode_piece(paths: list[str], target: tuple | None = None) -> list[Decoded]:
    """Decode + preprocess ``paths``; with a ``target`` (segment name, rows, shape, dtype, first row),
    arrays of the slot's shape and dtype are written into their rows instead of being sent back."""
    items = [decode_one(p, _WORKER_PREPROCESS) for p in paths]
    if target is None:
        return items
    import numpy as np

    name, rows, shape, dtype, start = target
    slot = _slot_array(name, rows, shape, dtype)
    out = []
    for i, d in enumerate(items):
        image = d.image
        if d.ok and isinstance(image, np.ndarray) and image.shape == slot.shape[1:] and image.dtype == slot.dtype:
            slot[start + i] = image
            out.append(Decoded(d.path, _InSlot()))
        else:
            out.append(d)
    return out


def _is_array(x: Any) -> bool:
    return type(x).__module__ == "numpy" and hasattr(x, "shape") and hasattr(x, "dtype")


def stack_batch(arrays: Sequence[Any]):
    """``np.stack(arrays)``, except when the arrays are consecutive rows of one buffer (a job's rows in
    its shared-memory slot): then the batch is a view of those rows, with no copy."""
    import numpy as np

    first = arrays[0] if len(arrays) else None
    base = getattr(first, "base", None)
    if (isinstance(first, np.ndarray) and base is not None
            and all(isinstance(a, np.ndarray) and a.base is base and a.shape == first.shape
                    and a.dtype == first.dtype and a.flags.c_contiguous for a in arrays)):
        whole = None
        if isinstance(base, np.ndarray):
            if base.flags.c_contiguous:
                whole = base.reshape(-1).view(np.uint8)
        else:
            try:
                whole = np.frombuffer(base, np.uint8)
            except (TypeError, ValueError, BufferError):
                whole = None
        if whole is not None:
            start = first.__array_interface__["data"][0] - whole.__array_interface__["data"][0]
            size = first.nbytes
            ptrs = [a.__array_interface__["data"][0] for a in arrays]
            end = start + size * len(arrays)
            if start >= 0 and end <= whole.nbytes and all(q == ptrs[0] + i * size for i, q in enumerate(ptrs)):
                return whole[start:end].view(first.dtype).reshape((len(arrays), *first.shape))
    return np.stack(arrays)


# -- the slot ring -------------------------------------------------------------------------------
def _release_segments(segments: list, arrays: list) -> None:
    """Unlink (always) and close (where no view of them is left) the ring's segments."""
    arrays.clear()
    for segment in segments:
        try:
            segment.unlink()
        except (FileNotFoundError, OSError):
            pass
        try:
            segment.close()
        except BufferError:  # a caller still holds a view: the memory goes with it, the name is gone
            pass
    segments.clear()


class SlotRing:
    """``slots`` batch-shaped arrays (``rows`` x ``shape``, ``dtype``) in shared memory, and which are free.

    Workers attach a slot by name and write their rows into it; the parent reads the rows in place.
    The segments are unlinked by :meth:`close`, by garbage collection or at interpreter exit.
    """

    def __init__(self, slots: int, rows: int, shape: tuple[int, ...], dtype: Any) -> None:
        import secrets
        from multiprocessing import shared_memory

        import numpy as np

        self.rows, self.shape, self.dtype = int(rows), tuple(int(x) for x in shape), np.dtype(dtype)
        self.nbytes = max(1, self.rows * int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize)
        token = f"{SHM_PREFIX}{os.getpid()}_{secrets.token_hex(3)}_"
        self._segments: list = []
        self.arrays: list = []
        self._finalizer = weakref.finalize(self, _release_segments, self._segments, self.arrays)
        for i in range(slots):
            segment = shared_memory.SharedMemory(name=f"{token}{i}", create=True, size=self.nbytes)
            self._segments.append(segment)
            self.arrays.append(np.ndarray((self.rows, *self.shape), self.dtype, buffer=segment.buf))
        self.names = [segment.name for segment in self._segments]
        self.free: deque[int] = deque(range(slots))

    @staticmethod
    def fits(slots: int, nbytes: int) -> bool:
        """Whether ``slots`` segments of ``nbytes`` leave :data:`SHM_HEADROOM` of the shared-memory
        file system free (Linux's ``/dev/shm``; elsewhere assumed)."""
        import shutil

        if not os.path.isdir("/dev/shm"):
            return True
        usage = shutil.disk_usage("/dev/shm")
        return slots * nbytes <= usage.free - SHM_HEADROOM * usage.total

    def target(self, slot: int, start: int) -> tuple:
        """What a worker needs to write rows ``start``... of ``slot``."""
        return (self.names[slot], self.rows, self.shape, self.dtype.str, start)

    def close(self) -> None:
        self._finalizer()


# -- parent side ---------------------------------------------------------------------------------
class DecodePool:
    """Decode + preprocess jobs of image paths in ``workers`` processes, ``prefetch`` jobs ahead.

    ``preprocess``: a picklable callable RGB PIL image -> whatever the model takes (an array); it is
    handed to the workers once (inherited when forked; pickled when spawned, and one that cannot be
    pickled then runs in the calling process on the decoded images instead). ``batch_rows``: the
    largest job expected (the model's batch size), so the shared-memory slots hold every job even if
    the first one is short. ``shared_memory=False`` sends every result back pickled. Use as a
    context manager or call :meth:`close`.
    """

    def __init__(self, workers: int = 0, preprocess: Callable[[Any], Any] | None = None,
                 prefetch: int | None = None, batch_rows: int | None = None, shared_memory: bool = True) -> None:
        if workers < 0:
            raise ConfigError(f"decode workers must be >= 0, got {workers}")
        self.workers = workers
        self.preprocess = preprocess
        #: jobs decoded ahead of the one the caller is working on (the bounded queue of ready batches)
        self.prefetch = prefetch if prefetch is not None else max(2, workers)
        self.batch_rows = batch_rows
        self.shared_memory = shared_memory
        #: the shared-memory slots, once the first job showed the preprocessor's arrays (None before,
        #: and for good when it returns anything else or the slots would not fit)
        self.ring: SlotRing | None = None
        import threading

        self._decide_lock = threading.Lock()
        self._executor = None
        self.start_method = start_method()
        self._payload: Any = preprocess
        self._local_preprocess = preprocess if workers == 0 else None
        if workers and preprocess is not None and self.start_method != "fork":
            try:
                self._payload = pickle.dumps(preprocess)
            except Exception:  # noqa: BLE001 - anything unpicklable: preprocess here instead
                self._payload, self._local_preprocess = None, preprocess
        # workers that only decode send PIL images: nothing for the slots to hold
        self._ring_decided = not shared_memory or preprocess is None or self._local_preprocess is not None

    def _pool(self):
        if self._executor is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            if os.name == "posix":
                # Start the resource tracker before the workers exist, so that they share this process's
                # (a worker that attaches a slot would otherwise start its own, which unlinks the slot
                # when that worker exits).
                from multiprocessing import resource_tracker

                resource_tracker.ensure_running()
            pickled = self.start_method != "fork"
            self._executor = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context(self.start_method),
                                                 initializer=_init_worker, initargs=(self._payload, pickled))
        return self._executor

    def _pieces(self, paths: list[str]) -> list[tuple[int, list[str]]]:
        """Cut one job so that all workers share it (a job is one model batch): (first row, paths)."""
        size = max(1, -(-len(paths) // self.workers))
        return [(s, paths[s : s + size]) for s in range(0, len(paths), size)]

    def _finish(self, items: list[Decoded]) -> list[Decoded]:
        pre = self._local_preprocess
        if pre is None:
            return items
        return [Decoded(d.path, preprocessed(pre, d.image)) if d.ok else d for d in items]

    def _decide_ring(self, n_paths: int, items: list[Decoded]) -> None:
        """After the first job: slots if every image came back as an array of one shape and dtype."""
        arrays = [d.image for d in items if d.ok]
        with self._decide_lock:
            if not arrays or self._ring_decided:
                return  # every image of the job was unreadable (the next job decides), or another map decided
            self._ring_decided = True
            self._make_ring(n_paths, arrays)

    def _make_ring(self, n_paths: int, arrays: list) -> None:
        if not (self.shared_memory and all(_is_array(a) for a in arrays)):
            return
        shape, dtype = arrays[0].shape, arrays[0].dtype
        if any(a.shape != shape or a.dtype != dtype for a in arrays):
            return
        rows = max(n_paths, self.batch_rows or 0)
        slots = self.prefetch + 1
        if SlotRing.fits(slots, rows * arrays[0].nbytes):
            try:
                self.ring = SlotRing(slots, rows, shape, dtype)
            except OSError:  # no shared memory here: pickled results, as before
                self.ring = None

    def map(self, jobs: Iterable[tuple[K, Sequence[str | Path]]], borrow: bool = False
            ) -> Iterator[tuple[K, list[Decoded]]]:
        """``(key, paths)`` jobs -> ``(key, decoded items)`` in the same order. A job with no paths
        passes through without touching the workers (text chunks of a mixed pool).

        ``borrow=True``: preprocessed arrays may be views into the job's shared-memory slot, valid
        until the next job is asked for (the model consumes each batch before that: no copy at all).
        Otherwise each such array is copied out of the slot once (still no pickling).
        """
        if self.workers == 0:
            for key, paths in jobs:
                yield key, [decode_one(p, self._local_preprocess) for p in paths]
            return
        pool = self._pool()
        in_flight: deque = deque()
        source = iter(jobs)
        exhausted = False
        held: tuple[SlotRing, int] | None = None  # the slot of the job the caller is working on

        def fill() -> None:
            nonlocal exhausted
            while not exhausted and len(in_flight) < self.prefetch + 1:
                if not self._ring_decided and in_flight:
                    return  # the first job's results decide the slots: wait for them
                try:
                    key, paths = next(source)
                except StopIteration:
                    exhausted = True
                    return
                paths = [str(p) for p in paths]
                ring = self.ring
                slot = ring.free.popleft() if ring is not None and paths and len(paths) <= ring.rows \
                    and ring.free else None
                futures = [pool.submit(_decode_piece, piece, None if slot is None else ring.target(slot, start))
                           for start, piece in self._pieces(paths)]
                in_flight.append((key, len(paths), futures, None if slot is None else (ring, slot)))

        try:
            while True:
                if held is not None:
                    held[0].free.append(held[1])
                    held = None
                fill()
                if not in_flight:
                    return
                key, n_paths, futures, slot = in_flight[0]
                items = [d for f in futures for d in f.result()]
                in_flight.popleft()
                if slot is not None:  # read from the ring the job was given (another map may replace self.ring)
                    rows = slot[0].arrays[slot[1]]
                    items = [Decoded(d.path, rows[i] if borrow else rows[i].copy()) if isinstance(d.image, _InSlot)
                             else d for i, d in enumerate(items)]
                    held = slot
                elif not self._ring_decided and n_paths:
                    self._decide_ring(n_paths, items)
                    fill()  # the jobs held back while the first one decided
                yield key, self._finish(items)
        finally:
            # Stopped early (the caller raised, broke off or was interrupted): pieces still running may
            # write into their slots, so wait for them before the slots are used again.
            for _, _, futures, slot in in_flight:
                for f in futures:
                    f.cancel()
                for f in futures:
                    try:
                        f.result()
                    except BaseException:  # noqa: BLE001 - cancelled or failed: the slot is unused now
                        pass
                if slot is not None:
                    slot[0].free.append(slot[1])
            if held is not None:
                held[0].free.append(held[1])

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self.ring is not None:
            self.ring.close()
            self.ring = None

    def __enter__(self) -> DecodePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        ring = getattr(self, "ring", None)
        if ring is not None:
            ring.close()


class DecodeAhead:
    """The image files of work batches decoded in a :class:`DecodePool` while the caller works on the
    batch before, for loops that call a model one batch at a time (caption runs: query and example
    images). ``batches``: ``(key, (payload, paths))`` in the order the caller will ask for them; the
    generator is advanced only as the pool fills its queue, so the payloads (e.g. chosen examples) are
    made a few batches ahead too. :meth:`take` returns the batch's payload and its images as a
    ``path -> RGB PIL image`` mapping for :func:`unirag.data.images.predecoded` (unreadable files
    are left out, to fail where they are loaded, as before), or None when ``key`` is not the next
    batch (the caller then works as without it)."""

    def __init__(self, batches: Iterable[tuple[K, tuple[Any, Sequence[str | Path]]]], workers: int) -> None:
        self.pool = DecodePool(workers)
        self._stream = self.pool.map(((key, payload), paths) for key, (payload, paths) in batches)
        self._current: tuple[Any, Any, dict[str, Any]] | None = None
        self._done = False

    def take(self, key: Any) -> tuple[Any, dict[str, Any]] | None:
        """(payload, images) of batch ``key``, advancing past the batches before it; None if not ahead."""
        while not self._done and (self._current is None or self._current[0] != key):
            try:
                (k, payload), decoded = next(self._stream)
            except StopIteration:
                self._done = True
                break
            except BaseException:  # making a payload failed: from here on the caller works alone
                self._done = True
                raise
            self._current = (k, payload, {d.path: d.image for d in decoded if d.ok})
            if k == key:
                break
        if self._current is not None and self._current[0] == key:
            return self._current[1], self._current[2]
        return None

    def close(self) -> None:
        self._stream.close()
        self.pool.close()


class DecodeJob:
    """The image files of one piece of work, handed to a :class:`DecodePool`'s workers now and
    collected later: for callers that submit each job themselves, from several threads (a Ray actor
    decodes the images of the driver's next call while its model works on the current one, see
    :mod:`unirag.runs.engine`). With a pool of 0 workers nothing is decoded here: :meth:`images` is
    empty and the caller's ``load_rgb`` decodes as before.

    The pool must only decode (no ``preprocess``): the images come back as RGB PIL images."""

    def __init__(self, pool: DecodePool, paths: Sequence[str | Path]) -> None:
        self.paths = list(dict.fromkeys(str(p) for p in paths))  # a file named twice is decoded once
        self._futures = []
        if pool.workers and self.paths:
            executor = pool._pool()
            self._futures = [executor.submit(_decode_piece, piece, None) for _, piece in pool._pieces(self.paths)]

    def images(self) -> dict[str, Any]:
        """``path -> RGB PIL image`` for :func:`unirag.data.images.predecoded`, waiting for the workers;
        unreadable files are left out (they fail where they are loaded, with the inline message)."""
        return {d.path: d.image for f in self._futures for d in f.result() if d.ok}

    def cancel(self) -> None:
        """Drop the pieces not started yet (a call that failed or was stopped before it needed them)."""
        for f in self._futures:
            f.cancel()
        self._futures = []


def start_workers(pool: DecodePool) -> None:
    """Start ``pool``'s worker processes now rather than at its first job (forked while the process is
    small: before a model is loaded into it)."""
    if pool.workers:
        list(pool._pool().map(int, range(pool.workers)))
