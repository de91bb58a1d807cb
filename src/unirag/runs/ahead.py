"""Work a local model's loop with each call's images decoded ahead, in decode workers.

Caption runs (a batch of queries per call), image runs (one query per call) and X^R agent calls with
a local model (one call at a time) all give a model calls whose images the model's process used to
decode itself, one call at a time, in between the model's work: query images, few-shot example
images, an agent call's image parts. :class:`AheadWork` plans the calls a loop will make (the groups
of items, in order), prepares each group (chooses its examples) and has the
:class:`~unirag.data.loader.ImageLoader` decode its image files a few groups ahead, while the model
works on the group before. The call is then given those images (``work_prepared(prepared items,
images)``, path -> decoded image), and the code that builds the model's inputs hands them to
:func:`~unirag.data.images.load_rgb` (``ahead=``), which returns them instead of decoding the files
again: what the model gets, and every record, is what inline decoding gives.

A group the plan does not hold (an item retried alone or deferred, a batch another process took
part of) or whose preparation failed is worked on the plain way: prepared here, given no images and so
decoded here,
failing exactly as it fails inline. An unreadable file is not in the decoded images, so it is
loaded - and fails the item with the inline message - where the model's code loads it.

Only for loops that make one call at a time in one thread (the decoded groups are taken in order).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")  # an item of the loop (a query, an agent call)
P = TypeVar("P")  # a prepared item (a query with its examples chosen)
R = TypeVar("R")  # what a call returns (a record, a list of records)


class _NotPrepared:
    """Stands for a group whose ``prepare`` raised ahead: it is worked on the plain way, where the
    error is raised again for the item it belongs to (not for the group being worked on when it
    happened ahead)."""


class AheadWork(Generic[T, P, R]):
    """``work_batch(items)`` for a loop over ``groups`` with their images decoded ahead.

    ``groups``: the calls the loop will make, in order (batches; one-item lists for a loop of single
    calls). ``key(item)``: the item's key (a group is known by its items' keys). ``prepare(item)``:
    what the call needs besides the images (made ahead too, in this process). ``image_paths(prepared
    items)``: the image files the call will load. ``work_prepared(prepared items, images)``: the call,
    given the images decoded ahead (path -> image; empty when worked the plain way).
    ``workers``: decode worker processes (> 0; see :func:`ahead_work` for the setting). Close it (or
    use it as a context manager) to stop the workers.
    """

    def __init__(self, groups: Sequence[Sequence[T]], key: Callable[[T], Hashable], prepare: Callable[[T], P],
                 image_paths: Callable[[list[P]], Sequence[str]], work_prepared: Callable[[list[P], dict[str, Any]], R],
                 workers: int) -> None:
        from unirag.data.loader import ImageLoader

        self.key, self.prepare, self.image_paths, self.work_prepared = key, prepare, image_paths, work_prepared
        groups = [list(g) for g in groups]
        self.index = {tuple(key(x) for x in g): i for i, g in enumerate(groups)}
        self._stream = ImageLoader(workers).map(self._jobs(groups))
        self._current: tuple[int, Any, dict[str, Any]] | None = None
        self._done = False
        self._last = -1  # the plan's group taken last: the decoded stream only goes forward

    def _jobs(self, groups: list[list[T]]):
        for i, group in enumerate(groups):
            try:
                prepared: Any = [self.prepare(x) for x in group]
                paths = list(dict.fromkeys(str(p) for p in self.image_paths(prepared)))
            except Exception:  # noqa: BLE001 - raised again when this group is worked on, the plain way
                prepared, paths = _NotPrepared(), []
            yield (i, prepared), paths

    def _take(self, i: int) -> tuple[Any, dict[str, Any]] | None:
        """(prepared items, path -> image) of group ``i``, advancing past the groups before it."""
        while not self._done and (self._current is None or self._current[0] < i):
            try:
                (k, prepared), decoded = next(self._stream)
            except StopIteration:
                self._done = True
                break
            except BaseException:  # the workers failed for good: from here on the loop works alone
                self._done = True
                raise
            self._current = (k, prepared, {d.path: d.image for d in decoded if d.ok})
        if self._current is not None and self._current[0] == i:
            return self._current[1], self._current[2]
        return None

    def work_batch(self, items: Sequence[T]) -> R:
        """The call for ``items``: with the images decoded ahead when the plan holds this group."""
        items = list(items)
        i = self.index.get(tuple(self.key(x) for x in items))
        if i is not None and i < self._last:
            i = None  # a group worked again after later ones (a retry): taking it would drain the stream
        got = self._take(i) if i is not None else None
        if i is not None:
            self._last = i
        if got is None or isinstance(got[0], _NotPrepared):
            return self.work_prepared([self.prepare(x) for x in items], {})
        return self.work_prepared(*got)

    def close(self) -> None:
        """Stop the decode workers (the groups not yet worked on are then worked on the plain way)."""
        self._done = True
        self._stream.close()

    def __enter__(self) -> AheadWork[T, P, R]:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def ahead_work(items: Sequence[T], group_size: int, *, key: Callable[[T], Hashable], prepare: Callable[[T], P],
               image_paths: Callable[[list[P]], Sequence[str]], work_prepared: Callable[[list[P], dict[str, Any]], R],
               engine: Any, n_images: int | None) -> AheadWork[T, P, R] | None:
    """An :class:`AheadWork` over ``items`` in groups of ``group_size``, or None where decoding stays
    inline: the ``engine`` options' decode workers 0, or ``auto`` for a run of fewer than
    :data:`~unirag.data.loader.AUTO_MIN_IMAGES` images (``n_images``, an estimate, None: unknown),
    or a single group (nothing to overlap with); see :func:`unirag.data.loader.workers_for`.
    ``engine``: ``"local"``/None, :class:`~unirag.runs.engine.EngineOptions` or a pool holding them."""
    from unirag.data.loader import workers_for

    options = getattr(engine, "options", engine)  # a WorkerPool's options

    size = max(1, int(group_size))
    groups = [list(items[s : s + size]) for s in range(0, len(items), size)]
    workers = workers_for(getattr(options, "decode_workers", None), n_images)
    if workers == 0 or len(groups) < 2 or n_images == 0:
        return None
    return AheadWork(groups, key, prepare, image_paths, work_prepared, workers)
