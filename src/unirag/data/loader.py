"""The one prefetching image loader: decode (and preprocess) images in worker processes, in order.

Every place that feeds images to a model (index builds, query encoding, caption / image / agent runs,
image metrics, Ray workers) hands :class:`ImageLoader` its planned jobs - ``(key, image paths)``, one
model call each - and gets them back in order as ``(key, [Decoded, ...])``, decoded a few jobs ahead
by ``torch.utils.data.DataLoader`` workers (``num_workers``, ``prefetch_factor``), as clip-retrieval's
inference loader does: :func:`unirag.data.images.load_rgb`, then the encoder's CPU ``preprocess``.
The jobs are the DataLoader's *sampler*, iterated here, so a job (and the work that plans it) is made
only as the workers have room for it.

* Bad images are not raised in the worker: each item is a :class:`Decoded` with the image or the
  reason it could not be read (callers skip-and-report or raise the inline error).
* A job's images come back in one shared-memory buffer (a tensor: DataLoader's file-descriptor
  passing, the segment unlinked at once, so nothing is left in ``/dev/shm`` even after a SIGKILL of
  the whole process group), never pickled: preprocessed arrays as the rows of one batch, whole decoded
  images as their pixels, made PIL images again here. The buffers are recycled: once nothing refers
  to a job's items any more, its buffer goes back, with a later job, to the worker that has it mapped
  (a process's first touch of a page costs more than the copy), so a run maps a few, not one a job.
* A worker that dies (killed, out of memory) costs a retry, not the run: its job is decoded here and
  new workers take the rest; :data:`MAX_WORKER_DEATHS` deaths in one loader stop it with one line.
* ``workers=0`` decodes inline, lazily, in the calling process.

Workers are forked on Linux (they inherit the preprocessor; a script without an ``if __name__ ==
"__main__":`` guard still works), spawned elsewhere (an unpicklable preprocessor then runs here).
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from unirag.errors import ConfigError, InputError, UniragError

K = TypeVar("K")
log = logging.getLogger(__name__)

#: ``auto`` uses the cores this process may run on, at most this many.
AUTO_WORKERS_CAP = 8
#: With ``auto``, fewer images than this are decoded inline: starting worker processes costs more.
AUTO_MIN_IMAGES = 128
#: With ``auto``, workers for a model that runs on this machine's CPU: its intra-op threads already use
#: every core; one worker overlaps the decoding (measured on 2 cores, docs/throughput.md).
AUTO_WORKERS_CPU_MODEL = 1
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


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def resolve_decode_workers(value: int | str | None) -> int | None:
    """The ``decode_workers`` setting: ``None``/``"auto"`` -> None (auto); an integer >= 0 -> itself."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    n = int(value) if str(value).strip().lstrip("-").isdigit() else None
    if n is None or n < 0:
        raise ConfigError(f"decode workers must be >= 0 (0 = decode inline) or 'auto', got {value!r}")
    return n


def workers_for(setting: int | str | None, n_images: int | None = None, model_on_cpu: bool = False,
                share: tuple[int, int] | None = None) -> int:
    """The one ``auto`` rule: workers for a job of ``n_images`` (None: unknown) under ``setting`` (used as
    is unless auto). Auto: small jobs inline; a model on this machine's CPU :data:`AUTO_WORKERS_CPU_MODEL`;
    else the cores, capped. ``share=(cpus, actors)``: a Ray actor's share of the cluster's CPUs less one
    for itself (0 beside a model on the CPU, whose threads use every core)."""
    setting = resolve_decode_workers(setting)
    if setting is not None:
        return setting
    if share is not None:
        cpus, actors = share
        return 0 if model_on_cpu else max(1, min(AUTO_WORKERS_CAP, cpus // max(1, actors) - 1))
    if n_images is not None and n_images < AUTO_MIN_IMAGES:
        return 0
    cores = min(available_cores(), AUTO_WORKERS_CAP)
    return min(AUTO_WORKERS_CPU_MODEL, cores) if model_on_cpu else cores


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


def stack_rows(arrays: Sequence[Any]):
    """``np.stack(arrays)``, or, when they are the consecutive rows of one batch (a job the workers sent
    back stacked), a view of those rows: no copy."""
    import numpy as np

    first = arrays[0]
    base, size = getattr(first, "base", None), getattr(first, "nbytes", 0)
    if isinstance(base, np.ndarray) and base.flags.c_contiguous and all(
            isinstance(a, np.ndarray) and a.base is base and a.flags.c_contiguous and a.shape == first.shape
            and a.dtype == first.dtype and _address(a) == _address(first) + i * size for i, a in enumerate(arrays)):
        start = _address(first) - _address(base)
        if 0 <= start and start + size * len(arrays) <= base.nbytes:
            whole = base.reshape(-1).view(np.uint8)[start : start + size * len(arrays)]
            return whole.view(first.dtype).reshape((len(arrays), *first.shape))
    return np.stack(arrays)


def _address(a: Any) -> int:
    return a.__array_interface__["data"][0]  # where the array's first byte is


# -- worker side: a job's paths -> tensors (shared memory on the way back) ---------------------------
class _Jobs:
    """The DataLoader's dataset: ``dataset[(n, paths, buffer)]`` decodes a job (the index *is* the job)."""

    def __init__(self, preprocess: Callable[[Any], Any] | None) -> None:
        self.preprocess = preprocess
        self.held: dict[int, Any] = {}  # the buffers this worker wrote into last

    def __getitem__(self, job: tuple[int, list[str], Any]) -> tuple[tuple[int, int], list[str | None], Any, list[Any]]:
        """The job's arrays (PIL images as their pixels) written into ``buffer`` (a shared-memory tensor
        the caller recycles), or into a new one sent back when it is None or too small; ``layout`` says
        where each is (anything else is pickled as it is). ``(n, this worker's id)`` first."""
        import numpy as np
        import torch
        from torch.utils.data import get_worker_info

        n, paths, buffer = job
        done = n, get_worker_info().id
        items = [decode_one(p, self.preprocess) for p in paths]
        arrays = [np.asarray(d.image) if _is_pil(d.image) or (isinstance(d.image, np.ndarray) and
                                                              not d.image.dtype.hasobject) else None for d in items]
        layout, size = [], 0
        for d, a in zip(items, arrays, strict=True):
            layout.append(d.image if a is None else _Slice(size, a.shape, a.dtype.str, _is_pil(d.image)))
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
        return done, [d.reason for d in items], fresh, layout


class _Slice(NamedTuple):  # where an array is in its job's buffer; ``pil``: make it a PIL image again
    offset: int
    shape: tuple[int, ...]
    dtype: str
    pil: bool


def _is_pil(x: Any) -> bool:
    return type(x).__module__.startswith("PIL.")


def _received(paths: list[str], reasons: list, buf: Any, layout: list[Any]) -> list[Decoded]:
    """A job's items as sent: views of its buffer (rows of one batch when alike), PIL images, or as pickled."""
    import numpy as np
    from PIL import Image

    out = []
    for p, reason, at in zip(paths, reasons, layout, strict=True):
        if isinstance(at, _Slice):
            image = np.ndarray(at.shape, np.dtype(at.dtype), buffer=buf, offset=at.offset)
            at = Image.fromarray(image) if at.pil else image
        out.append(Decoded(p, at, reason))
    return out


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

    def _finish(self, items: list[Decoded]) -> list[Decoded]:
        pre = self._local
        return items if pre is None else [Decoded(d.path, preprocessed(pre, d.image)) if d.ok else d for d in items]

    def map(self, jobs: Iterable[tuple[K, Sequence[str | Path]]]) -> Iterator[tuple[K, list[Decoded]]]:
        """``(key, paths)`` jobs -> ``(key, decoded items)`` in the same order; the jobs iterable is
        advanced only as the workers have room. Meanwhile Pillow keeps up to :data:`PIL_BLOCKS_KEPT`
        freed image memory blocks (its block cache, ``PILLOW_BLOCKS_MAX``): the images made here (decoded
        inline, or from the workers' pixels) reuse the last job's memory instead of new pages, which
        cost this process more than the copy itself (docs/throughput.md)."""
        from PIL import Image

        before = Image.core.get_blocks_max()
        Image.core.set_blocks_max(max(before, PIL_BLOCKS_KEPT))
        try:
            yield from self._map(iter(jobs))
        finally:
            Image.core.set_blocks_max(before)  # the cache is freed

    def _map(self, source: Iterator[tuple[K, Sequence[str | Path]]]) -> Iterator[tuple[K, list[Decoded]]]:
        if self.workers == 0:
            for key, paths in source:
                yield key, [decode_one(p, self._local) for p in paths]
            return
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
                    yield key, self._finish(_received(paths, reasons, buffer and buffer[1], layout))
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

        class Sampler:
            def __iter__(self):
                return sampler()

        loader = DataLoader(_Jobs(None if self._local is not None else self.preprocess), batch_size=None,
                            sampler=Sampler(), num_workers=self.workers, prefetch_factor=self.prefetch,
                            collate_fn=_collate, multiprocessing_context=self.context)
        with ThreadPoolExecutor(1, thread_name_prefix="unirag-loader-start") as starter:
            return starter.submit(contextvars.copy_context().run, iter, loader).result()


def decode_all(paths: Sequence[str | Path], workers: int, chunk: int = 8) -> dict[str, Any]:
    """``path -> RGB PIL image`` of the readable files among ``paths`` (each once), decoded by an
    :class:`ImageLoader`; an unreadable file is left out (it fails where it is loaded, as inline)."""
    unique = list(dict.fromkeys(str(p) for p in paths))
    jobs = ((None, unique[s : s + chunk]) for s in range(0, len(unique), chunk))
    return {d.path: d.image for _, items in ImageLoader(workers).map(jobs) for d in items if d.ok}
