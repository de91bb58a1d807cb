"""The one prefetching image loader: decode (and preprocess) images in worker processes, in order.

Every place that feeds images to a model hands :class:`ImageLoader` its planned jobs - ``(key, image
paths)``, one model call each - and gets them back in order as ``(key, [Decoded, ...])``, decoded a
few jobs ahead by ``torch.utils.data.DataLoader`` workers (:func:`unirag.data.images.load_rgb`, then
the encoder's CPU ``preprocess``), as clip-retrieval's inference loader does. The jobs are the
DataLoader's *sampler*, so a job (and the work that plans it) is made only as the workers have room.
A bad image is a :class:`Decoded` with its reason; pixels come back through recycled shared-memory
buffers, never pickled; a dead worker costs a retry (:data:`MAX_WORKER_DEATHS` stop the loader);
``workers=0`` decodes inline. Why each of these, and what they cost: docs/throughput.md. Workers are
forked on Linux (they inherit the preprocessor), spawned elsewhere (an unpicklable preprocessor then
runs here). :func:`ahead` puts a loop of model calls on it.
"""

from __future__ import annotations

import logging
import pickle
import sys
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from unirag.errors import InputError, UniragError

K = TypeVar("K")
T = TypeVar("T")  # an item of a loop of model calls
R = TypeVar("R")  # what a call returns
log = logging.getLogger(__name__)

#: Worker deaths one loader survives (each job then decoded here, new workers for the rest).
MAX_WORKER_DEATHS = 3
#: Shared-memory buffers a decode worker keeps mapped (the caller sends them back with later jobs).
HELD_BUFFERS = 8
#: Freed PIL image memory blocks kept for the next images while a loader runs (see ImageLoader.map).
PIL_BLOCKS_KEPT = 64


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


def preprocessed(preprocess: Callable[[Any], Any], image: Any) -> Any:
    """``preprocess(image)``, a numpy result made C-contiguous (so reductions over a batch sum in the
    same order wherever it was made: the vectors must not depend on where it ran)."""
    import numpy as np

    out = preprocess(image)
    return np.ascontiguousarray(out) if type(out).__module__ == "numpy" else out


def decode_one(path: str | Path, preprocess: Callable[[Any], Any] | None = None) -> Decoded:
    """Decode one file with :func:`unirag.data.images.load_rgb` and apply ``preprocess``."""
    from unirag.data import images

    try:
        image = images.load_rgb(path)
    except InputError as e:
        return Decoded(str(path), None, e.reason)
    return Decoded(str(path), preprocessed(preprocess, image) if preprocess is not None else image)


# -- worker side: a job's paths -> tensors (shared memory on the way back) ---------------------------
class _Slice(NamedTuple):  # where an array is in its job's buffer; ``pil``: make it a PIL image again
    offset: int
    shape: tuple[int, ...]
    dtype: str
    pil: bool


class _Jobs:
    """The DataLoader's dataset: ``dataset[(n, paths, buffer)]`` decodes a job (the index *is* the job)."""

    def __init__(self, preprocess: Callable[[Any], Any] | None) -> None:
        self.preprocess = preprocess
        self.held: dict[int, Any] = {}  # the buffers this worker wrote into last

    def __getitem__(self, job: tuple[int, list[str], Any]) -> tuple[tuple[int, int], list, Any, list]:
        """``(n, this worker's id)``, the reasons, a new buffer (None: ``buffer`` had room) and where
        each item is: its array (PIL images as their pixels) in the shared-memory buffer the caller
        recycles, or the item itself, pickled."""
        import numpy as np
        import torch
        from torch.utils.data import get_worker_info

        n, paths, buffer = job
        items = [decode_one(p, self.preprocess) for p in paths]
        pil = [type(d.image).__module__.startswith("PIL.") for d in items]
        arrays = [np.asarray(d.image) if is_pil or (isinstance(d.image, np.ndarray) and
                                                    not d.image.dtype.hasobject) else None
                  for d, is_pil in zip(items, pil, strict=True)]
        layout, size = [], 0
        for d, a, is_pil in zip(items, arrays, pil, strict=True):
            layout.append(d.image if a is None else _Slice(size, a.shape, a.dtype.str, is_pil))
            size += 0 if a is None else -(-a.nbytes // 16) * 16
        fresh = None
        if size and (buffer is None or buffer.numel() < size):  # with room for a slightly larger job next time
            if buffer is not None:
                self.held.pop(buffer.data_ptr(), None)  # too small: the caller lets it go too
            buffer = fresh = torch.empty(size + size // 8, dtype=torch.uint8).share_memory_()
        if size:
            self.held[buffer.data_ptr()] = buffer  # kept mapped here: it comes back with a later job
            if len(self.held) > HELD_BUFFERS:
                self.held.pop(next(iter(self.held)))
        for a, at in zip(arrays, layout, strict=True):
            if a is not None:
                buffer.numpy()[at.offset : at.offset + a.nbytes] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        return (n, get_worker_info().id), [d.reason for d in items], fresh, layout


def _collate(job: Any) -> Any:
    return job


# -- parent side ---------------------------------------------------------------------------------
class ImageLoader:
    """Decode + preprocess jobs of image paths in ``workers`` DataLoader processes, ``prefetch`` jobs
    per worker ahead of the caller, in order. ``preprocess``: a picklable callable RGB PIL image -> what
    the model takes (an array), or None: the items are RGB PIL images."""

    def __init__(self, workers: int = 0, preprocess: Callable[[Any], Any] | None = None, prefetch: int = 2) -> None:
        self.workers, self.preprocess, self.prefetch = workers, preprocess, max(1, prefetch)
        self.context = "fork" if sys.platform.startswith("linux") else "spawn"
        self._local = preprocess if workers == 0 else None  # applied here (inline, or to what workers decoded)
        if workers and preprocess is not None and self.context != "fork":
            try:
                pickle.dumps(preprocess)
            except Exception:  # noqa: BLE001 - anything unpicklable: preprocess here instead
                self._local = preprocess
        self.deaths = 0  # worker deaths so far (each one's job decoded here)

    def map(self, jobs: Iterable[tuple[K, Sequence[str | Path]]]) -> Iterator[tuple[K, list[Decoded]]]:
        """``(key, paths)`` jobs -> ``(key, decoded items)`` in order, the jobs advanced only as the workers
        have room. Pillow meanwhile keeps :data:`PIL_BLOCKS_KEPT` freed image blocks: the images made here
        reuse the last job's memory, not new pages (which cost more than the copy, docs/throughput.md)."""
        from PIL import Image

        before = Image.core.get_blocks_max()
        Image.core.set_blocks_max(max(before, PIL_BLOCKS_KEPT))
        try:
            if self.workers == 0:
                yield from ((key, [decode_one(p, self._local) for p in paths]) for key, paths in jobs)
            else:
                yield from self._pooled(iter(jobs))
        finally:
            Image.core.set_blocks_max(before)  # the cache is freed

    def _pooled(self, source: Iterator[tuple[K, Sequence[str | Path]]]) -> Iterator[tuple[K, list[Decoded]]]:
        import numpy as np
        from PIL import Image

        handed: deque = deque()  # (n, key, paths, buffer) given to the workers, not yet back
        again: deque = deque()  # (n, key, paths) a dead worker's loader held, for the next one
        count = iter(range(sys.maxsize))
        lent: dict[int, list] = {}  # worker -> (tensor, its array) of the jobs the caller got; jobs go
        # to the DataLoader's workers in turn, each with a buffer the worker that takes it has mapped

        def free_buffer(worker: int) -> Any:
            """A buffer whose items nobody holds any more (each view of it refers to its array): its array
            is counted as often as a new object in a pair is (what a call adds differs between Pythons)."""
            probe = (None, object())
            alone = sys.getrefcount(probe[1])
            for i, pair in enumerate(lent.get(worker, ())):
                if sys.getrefcount(pair[1]) == alone:
                    return lent[worker].pop(i)
            return None

        def sampler() -> Iterator[tuple[int, list[str], Any]]:
            for turn in range(sys.maxsize):
                if again:
                    job = again.popleft()
                else:
                    try:
                        key, paths = next(source)
                    except StopIteration:
                        return
                    job = (next(count), key, [str(p) for p in paths])
                buffer = free_buffer(turn % self.workers) if job[2] else None
                handed.append((*job, buffer))
                yield job[0], job[2], None if buffer is None else buffer[0]

        def received(at: Any, reason: str | None, buf: Any) -> Any:  # a view of the job's buffer, or as sent
            if isinstance(at, _Slice):
                view = np.ndarray(at.shape, np.dtype(at.dtype), buffer=buf, offset=at.offset)
                at = Image.fromarray(view) if at.pil else view
            return preprocessed(self._local, at) if self._local is not None and reason is None else at

        while True:
            it = self._start(sampler)
            try:
                for (n, worker), reasons, fresh, layout in it:
                    first, key, paths, buffer = handed.popleft()
                    assert first == n, "decode jobs came back out of order"
                    if fresh is not None:  # the job's own (the one sent was None or too small)
                        buffer = (fresh, fresh.numpy())
                    if buffer is not None:
                        lent.setdefault(worker, []).append(buffer)
                    yield key, [Decoded(p, received(at, r, buffer and buffer[1]), r)
                                for p, r, at in zip(paths, reasons, layout, strict=True)]
                return
            except RuntimeError as e:
                if "exited unexpectedly" not in str(e) and "killed by signal" not in str(e):
                    raise  # an error of the preprocessor, raised in the worker
                self.deaths += 1
                if self.deaths >= MAX_WORKER_DEATHS:
                    raise UniragError(f"decode workers died {self.deaths} times ({e}); rerun with "
                                      f"--decode-workers 0 to decode in the model's process") from None
                log.warning("a decode worker died (%s): its images are decoded here", e)
                it = None  # shuts the other workers down
                again.extend(job[:3] for job in handed)
                handed.clear()
                if again:
                    _, key, paths = again.popleft()
                    yield key, [decode_one(p, self.preprocess) for p in paths]
            finally:
                it = None

    def _start(self, sampler: Callable[[], Iterator[Any]]):
        """A DataLoader iterator over ``sampler``'s jobs, created off the main thread: DataLoader then
        installs no SIGCHLD handler (which would raise a dead worker's error at whatever line this
        process is running - the model's call, a record's write); the death surfaces here instead."""
        import contextvars
        from concurrent.futures import ThreadPoolExecutor

        from torch.utils.data import DataLoader

        jobs = type("Sampler", (), {"__iter__": lambda _: sampler()})()  # each DataLoader iterates it anew
        loader = DataLoader(_Jobs(None if self._local is not None else self.preprocess), batch_size=None,
                            sampler=jobs, num_workers=self.workers, prefetch_factor=self.prefetch,
                            collate_fn=_collate, multiprocessing_context=self.context)
        with ThreadPoolExecutor(1, thread_name_prefix="unirag-loader-start") as starter:
            return starter.submit(contextvars.copy_context().run, iter, loader).result()


def ahead(groups: Sequence[Sequence[T]], key: Callable[[T], Hashable], prepare: Callable[[T], Any],
          image_paths: Callable[[list], Sequence[str]], work: Callable[[list, dict[str, Any]], R],
          workers: int) -> tuple[Callable[[Sequence[T]], R], Iterator | None]:
    """``(work_batch, stream)`` for a loop that makes the calls ``groups``, in order, one at a time: each
    group's items are prepared (``prepare(item)``, here) and its ``image_paths(prepared)`` decoded by
    ``workers`` processes while the model works on the group before; ``work_batch(items)`` is ``work(
    prepared, path -> decoded image)``. A group the plan does not hold or has passed (a retry, a batch
    another process took part of), or whose preparation failed, is worked the plain way: prepared
    there, no images, so decoded - and failing - as inline. ``stream`` (close it to stop the workers)
    is None where decoding stays inline (0 workers, or one group: no overlap)."""
    plain = lambda items: work([prepare(x) for x in items], {})  # noqa: E731
    if workers == 0 or len(groups) < 2:
        return plain, None
    index = {tuple(key(x) for x in g): i for i, g in enumerate(groups)}
    last = -1  # the plan's group taken last: the stream only goes forward

    def jobs() -> Iterator[tuple[tuple[int, Any], list[str]]]:
        for i, group in enumerate(groups):
            try:
                prepared: Any = [prepare(x) for x in group]
                paths = list(dict.fromkeys(str(p) for p in image_paths(prepared)))
            except Exception:  # noqa: BLE001 - raised again when this group is worked on, the plain way
                prepared, paths = None, []
            yield (i, prepared), paths

    stream = ImageLoader(workers).map(jobs())

    def work_batch(items: Sequence[T]) -> R:
        nonlocal last
        i = index.get(tuple(key(x) for x in items), -1)
        if i > last:
            last = i
            for (k, prepared), decoded in stream:  # a failed stream ends: the rest is worked the plain way
                if k == i and prepared is not None:
                    return work(prepared, {d.path: d.image for d in decoded if d.ok})
                if k == i:
                    break
        return plain(items)
    return work_batch, stream
