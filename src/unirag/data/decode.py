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
"""

from __future__ import annotations

import os
import pickle
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


def workers_for(setting: int | None, n_images: int | None) -> int:
    """Workers to use for a job of ``n_images`` (None: unknown, e.g. a streamed pool) under ``setting``.

    An explicit setting is used as is; ``auto`` decodes small jobs inline (:data:`AUTO_MIN_IMAGES`).
    """
    if setting is not None:
        return setting
    if n_images is not None and n_images < AUTO_MIN_IMAGES:
        return 0
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
    _exit_with_parent()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    _WORKER_PREPROCESS = pickle.loads(preprocess) if pickled and preprocess is not None else preprocess
    import sys

    torch = sys.modules.get("torch")  # imported by unpickling a torch-based preprocessor
    if torch is not None:
        torch.set_num_threads(1)


def _decode_piece(paths: list[str]) -> list[Decoded]:
    return [decode_one(p, _WORKER_PREPROCESS) for p in paths]


# -- parent side ---------------------------------------------------------------------------------
class DecodePool:
    """Decode + preprocess jobs of image paths in ``workers`` processes, ``prefetch`` jobs ahead.

    ``preprocess``: a picklable callable RGB PIL image -> whatever the model takes (an array); it is
    handed to the workers once (inherited when forked; pickled when spawned, and one that cannot be
    pickled then runs in the calling process on the decoded images instead). Use as a context
    manager or call :meth:`close`.
    """

    def __init__(self, workers: int = 0, preprocess: Callable[[Any], Any] | None = None,
                 prefetch: int | None = None) -> None:
        if workers < 0:
            raise ConfigError(f"decode workers must be >= 0, got {workers}")
        self.workers = workers
        self.preprocess = preprocess
        #: jobs decoded ahead of the one the caller is working on (the bounded queue of ready batches)
        self.prefetch = prefetch if prefetch is not None else max(2, workers)
        self._executor = None
        self.start_method = start_method()
        self._payload: Any = preprocess
        self._local_preprocess = preprocess if workers == 0 else None
        if workers and preprocess is not None and self.start_method != "fork":
            try:
                self._payload = pickle.dumps(preprocess)
            except Exception:  # noqa: BLE001 - anything unpicklable: preprocess here instead
                self._payload, self._local_preprocess = None, preprocess

    def _pool(self):
        if self._executor is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            pickled = self.start_method != "fork"
            self._executor = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context(self.start_method),
                                                 initializer=_init_worker, initargs=(self._payload, pickled))
        return self._executor

    def _pieces(self, paths: list[str]) -> list[list[str]]:
        """Cut one job so that all workers share it (a job is one model batch)."""
        size = max(1, -(-len(paths) // self.workers))
        return [paths[s : s + size] for s in range(0, len(paths), size)]

    def _finish(self, items: list[Decoded]) -> list[Decoded]:
        pre = self._local_preprocess
        if pre is None:
            return items
        return [Decoded(d.path, preprocessed(pre, d.image)) if d.ok else d for d in items]

    def map(self, jobs: Iterable[tuple[K, Sequence[str | Path]]]) -> Iterator[tuple[K, list[Decoded]]]:
        """``(key, paths)`` jobs -> ``(key, decoded items)`` in the same order. A job with no paths
        passes through without touching the workers (text chunks of a mixed pool)."""
        if self.workers == 0:
            for key, paths in jobs:
                yield key, [decode_one(p, self._local_preprocess) for p in paths]
            return
        pool = self._pool()
        in_flight: deque = deque()
        source = iter(jobs)
        exhausted = False
        while True:
            while not exhausted and len(in_flight) < self.prefetch + 1:
                try:
                    key, paths = next(source)
                except StopIteration:
                    exhausted = True
                    break
                paths = [str(p) for p in paths]
                in_flight.append((key, [pool.submit(_decode_piece, piece) for piece in self._pieces(paths)]))
            if not in_flight:
                return
            key, futures = in_flight.popleft()
            items = [d for f in futures for d in f.result()]
            yield key, self._finish(items)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> DecodePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
