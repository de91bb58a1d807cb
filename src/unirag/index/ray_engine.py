"""Run the pool's embedding shards on Ray Data: one model load per worker, GPUs reserved per worker.

Each shard (:mod:`unirag.index.shards`) is one row of a Ray dataset mapped by a pool of actors, each
loading the encoder once. A finished shard is on disk at once, so a killed run loses only the shards
in flight, and only shards without a done marker are submitted. Actors are sized by the run's
:class:`~unirag.runs.engine.EngineOptions`, as for generation runs; started locally, the default is
``cpus - 1`` workers so that one CPU stays free for Ray Data's own tasks (an actor pool that takes
every CPU can hang waiting for a read task: ray-project/ray#44687, seen on a 2-CPU machine). Torch
in an actor uses the CPUs divided among the workers (Ray would set 1 thread). With GPUs reserved,
images are decoded in the cluster's spare CPUs (:mod:`unirag.data.loader`: a GPU embeds faster than
one core decodes); on CPU-only runs inline, as the model threads already use every core.

Without ``ray_address`` a local Ray is started and stopped; with one, the run joins that cluster,
and the pool, the images and the shards folder must be at the same path on every node. The ``"ray"``
engine of :meth:`unirag.Index.build` (:func:`build_with_ray`) then builds the index from the shards
folder; rerunning resumes.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from unirag.index import shards


def build_with_ray(pool: Path, images_root, out_dir, encoder, info, index_type, batch_size, params,
                   progress, allow_shrink, engine, dtype: str | None, shards_dir: str | Path | None = None,
                   shard_size: int = shards.DEFAULT_SHARD_SIZE) -> dict[str, Any]:
    """Embed the shards of ``pool`` not yet done on Ray, sized by ``engine``
    (:class:`~unirag.runs.engine.EngineOptions`), then build the index from the shards folder (default
    ``<out_dir>/shards``). Returns the manifest.

    Workers load ``info``'s encoder spec (``info``: what the manifest records about ``encoder``) on
    ``cuda`` when GPUs are reserved (else CPU) in ``dtype``, under ``encoder``'s autocast (see
    :func:`unirag.encoders.registry.load_encoder`); their encoder's fingerprint must be the one planned
    (a mismatch fails the shard with both names)."""
    from unirag.index.embeddings import build_from_embeddings
    from unirag.ray_support import default_workers, ray_session

    shards_dir = Path(shards_dir if shards_dir is not None else Path(out_dir) / "shards")
    plan = shards.load_or_create_plan(shards_dir, pool, info, shard_size=shard_size)
    todo = [i for i in range(plan.n_shards) if shards.done_record(shards_dir, i) is None]  # not done yet
    if progress:
        print(f"shards: {plan.n_shards - len(todo)} of {plan.n_shards} already done, embedding {len(todo)} "
              f"on Ray", flush=True)
    if todo:
        with ray_session(engine.ray_address, log_to_driver=progress) as ray:
            ray.data.DataContext.get_current().enable_progress_bars = progress
            # by GPUs when asked for, else CPUs minus one for Ray Data's tasks
            n_workers = max(1, min(engine.workers or default_workers(ray, engine, reserve_cpus=1), len(todo)))
            device, threads, decode = engine.actor_sizing(ray, n_workers)
            ds = ray.data.from_items([{"shard": i} for i in todo], override_num_blocks=len(todo))
            ds.map_batches(
                _ShardWorker, batch_size=1, concurrency=n_workers, num_cpus=engine.cpus_per_worker,
                num_gpus=engine.gpus_per_worker,
                fn_constructor_kwargs={"shards_dir": str(shards_dir.resolve()), "encoder_spec": info["spec"],
                                       "images_root": str(images_root) if images_root else None,
                                       "batch_size": batch_size, "threads": threads,
                                       "load": {"device": device, "dtype": dtype,
                                                "autocast": getattr(encoder, "autocast_dtype", None),
                                                "decode_workers": decode}}).materialize()
    return build_from_embeddings(pool, shards_dir, out_dir, info, index_type=index_type, params=params,
                                 images_root=images_root, progress=progress, allow_shrink=allow_shrink)


class _ShardWorker:
    """A Ray actor: loads the encoder once (``load``: :func:`unirag.encoders.registry.load_encoder`'s
    options), then embeds whole shards."""

    def __init__(self, shards_dir: str, encoder_spec: str | None, images_root: str | None, batch_size: int,
                 threads: int | None, load: dict[str, Any]) -> None:
        if threads:
            import torch

            torch.set_num_threads(threads)
        from unirag.encoders.registry import load_encoder

        self.embed = partial(shards.embed_shard, shards_dir, shards.read_plan(shards_dir),
                             encoder=load_encoder(encoder_spec, **load), images_root=images_root,
                             batch_size=batch_size)

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        for i in batch["shard"]:  # the shard's files are its result
            self.embed(int(i))
        return batch
