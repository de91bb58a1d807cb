"""Starting or joining Ray, once for every part of unirag that runs on it (index build, generation runs).

:func:`ray_session` starts a private local Ray (or joins the cluster at an address, or uses the Ray
already initialised here) and :func:`default_workers` sizes a pool of actors to the cluster. Workers'
console output stays in Ray's session logs unless ``log_to_driver=True``. Workers get the driver's
``PYTHONPATH`` (so ``python:MODULE:FACTORY`` plugins import there too) and the variables of
:data:`FORWARDED_ENV` and ``UNIRAG_*``, never one whose name says it holds a secret.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

from unirag.errors import ConfigError
from unirag.redact import _secret_name

#: Environment variables passed on to Ray workers when set in the driver (besides UNIRAG_*).
FORWARDED_ENV = ("HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_CACHE")


def worker_env() -> dict[str, str]:
    """Variables the workers need from the driver: PYTHONPATH (the driver's import path), UNIRAG_* and
    the Hugging Face cache/offline switches; never a variable whose name says it holds a secret."""
    env = {k: v for k, v in os.environ.items()
           if (k.startswith("UNIRAG_") or k in FORWARDED_ENV) and not _secret_name(k)}
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    extra = os.environ.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([*(extra.split(os.pathsep) if extra else []), *paths]))
    return env


@contextlib.contextmanager
def ray_session(address: str | None = None, *, object_store_memory: int | None = None,
                log_to_driver: bool = False) -> Iterator[Any]:
    """Yield the ``ray`` module connected to the cluster at ``address`` or to a local Ray started with
    every CPU and ``object_store_memory`` (and stopped on exit). Workers run at normal priority: Ray's
    default niceness 15 is for background work, and here the workers are the job."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--engine ray needs Ray: pip install 'unirag[ray]'") from None
    if ray.is_initialized():
        yield ray
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": log_to_driver,
                              "logging_level": logging.WARNING,
                              "runtime_env": {"env_vars": worker_env()}}
    if address:
        ray.init(address=address, **kwargs)
    else:
        ray.init(num_cpus=os.cpu_count() or 1, object_store_memory=object_store_memory,
                 _system_config={"worker_niceness": 0}, **kwargs)
    try:
        yield ray
    finally:
        ray.shutdown()


def default_workers(ray_module, options: Any, reserve_cpus: int = 0) -> int:
    """Workers of ``options`` (:class:`~unirag.runs.engine.EngineOptions`) that fit the cluster: by GPUs when
    asked for, else by CPUs (less ``reserve_cpus``)."""
    resources = ray_module.cluster_resources()
    if options.gpus_per_worker:
        return max(1, int(resources.get("GPU", 0) // options.gpus_per_worker))
    return max(1, int((int(resources.get("CPU", 1)) - reserve_cpus) // max(options.cpus_per_worker, 1e-9)))

