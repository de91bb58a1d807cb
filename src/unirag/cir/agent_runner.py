"""Runs batches of agent calls for one role: cached, concurrent, retried, failures recorded.

The generator for a role is created only when some call is not yet in the cache, so a rerun whose
calls are all cached needs neither the model server nor the weights.

With ``engine="ray"`` a role played by a local model (``hf:``, ``python:``) is called on Ray workers
(:mod:`unirag.runs.engine`): each worker loads the model once, roles sharing a model share the
workers, and every call is written into the same cache store, so a run is resumable across engines.
API roles keep their bounded concurrency in this process.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from unirag.cir.agents import build_messages, call_agent
from unirag.cir.cache import CallCache, CallRequest, call_key
from unirag.cir.config import XRConfig
from unirag.messages import ImagePart, with_decoded
from unirag.runs.executor import RunKind, execute

K = TypeVar("K")


@dataclass
class AgentJob(RunKind):
    """One role's agent calls as a run kind (:class:`~unirag.runs.executor.RunKind`): the role, its
    generation options, JSON attempts and the generator playing it (here, or on a Ray worker: the
    driver sends ``functools.partial(AgentJob, role, options, json_attempts)``, the worker adds its model)."""

    role: str
    options: Any
    json_attempts: int
    generator: Any

    @staticmethod
    def key(request: CallRequest) -> str:
        return request.key

    @staticmethod
    def image_paths(requests: Sequence[CallRequest]) -> list[str]:
        """The image files these agent calls send (their messages' image parts given by path), in order:
        what a decode worker can decode ahead (see :mod:`unirag.data.loader`)."""
        return [str(part.path) for r in requests for m in r.messages for part in m.parts
                if isinstance(part, ImagePart) and part.path is not None]

    def work_batch(self, requests: list[CallRequest], images: dict[str, Any]) -> list[dict[str, Any]]:
        """Each call's parsed reply; ``images``: the image parts' files decoded ahead (path -> image)."""
        return [call_agent(self.generator, self.role, with_decoded(r.messages, images), self.options,
                           self.json_attempts, r.expect_answers, r.fmt) for r in requests]


class AgentRunner:
    def __init__(self, config: XRConfig, cache: CallCache, generator_factory: Callable[..., Any] | None = None,
                 progress: bool = True, engine: Any = "local") -> None:
        from unirag.runs.engine import with_decode_default

        self.config = config
        self.cache = cache
        # the decode processes from the agents YAML's setting (or --decode-workers) where the engine options
        # leave them to auto: one setting for the calls decoded ahead here and on Ray workers
        self.engine = with_decode_default(engine, config.settings.decode_workers)
        self._pool = None
        # closes the pool this runner opened (a caller's stays open) and the generators it loaded
        self._pools = contextlib.ExitStack()
        self.factory = generator_factory  # None: unirag.generators.registry.load_generator
        self.progress = progress
        self._generators: dict[str, Any] = {}
        #: role -> {"requested", "called", "cached", "failed"} for the run report
        self.stats: dict[str, dict[str, int]] = {}

    def request(self, role: str, expect_answers: int | None = None, fmt: str | None = None,
                **prompt: Any) -> CallRequest:
        """The call to make (or find in the cache) for ``role``: its message built from ``prompt`` (the
        keywords of :func:`~unirag.cir.agents.build_messages`), its reply format."""
        messages = build_messages(role, **prompt)
        return CallRequest(call_key(role, self.config.roles[role].fingerprint(), messages, fmt), messages,
                           expect_answers, fmt)

    def run(self, role: str, requests: list[CallRequest], desc: str | None = None) -> dict[str, Any]:
        """Make every call not yet cached; return key -> parsed output (None where it failed)."""
        rc = self.config.roles[role]  # every role a search calls has a model (Search._check_roles)
        store = self.cache.store(role)
        unique = list({r.key: r for r in requests}.values())
        done = store.done_keys()
        todo = [r for r in unique if r.key not in done]
        st = self.stats.setdefault(role, {"requested": 0, "called": 0, "cached": 0, "failed": 0})
        st["requested"] += len(unique)
        st["cached"] += len(unique) - len(todo)
        if todo:
            # A local model (on Ray workers, or one call at a time here) has its calls' images decoded
            # ahead, in decode workers; API roles send the files as they are and decode nothing.
            from unirag.runs.engine import open_pool, runs_on_ray

            options, attempts = rc.generation_options(), self.config.settings.json_attempts
            job, on_ray = AgentJob(role, options, attempts, None), {}
            # A caller's own generator factory builds models only it knows how to: those calls stay here.
            if self.factory is None and runs_on_ray(self.engine, rc.model):
                from unirag.pipelines.remote_models import ModelRecipe

                if self._pool is None:
                    self._pool = self._pools.enter_context(open_pool(self.engine))
                on_ray = {"pool": self._pool, "recipe": ModelRecipe(rc.model, dict(rc.options)),
                          "open_kind": functools.partial(AgentJob, role, options, attempts)}
            else:
                gen_id = rc.fingerprint()
                if gen_id not in self._generators:  # roles sharing a model share one client / loaded model
                    from unirag.generators.registry import load_generator

                    self._generators[gen_id] = gen = (self.factory or load_generator)(rc.model, **rc.options)
                    if getattr(gen, "close", None) is not None:
                        self._pools.callback(gen.close)
                job.generator = self._generators[gen_id]
            local = rc.model.startswith("hf:")  # a model in this process: one call at a time
            counts = execute(job, todo, store, concurrency=1 if local else self.config.settings.concurrency,
                             decode_ahead=local, engine=self.engine, desc=desc or role, progress=self.progress, **on_ray)
            st["called"] += counts["ok"] + counts["error"]
        records = {r.key: store.get(r.key) or {} for r in unique}  # a failed call's output: None
        out = {k: rec.get("output") if rec.get("status", "ok") == "ok" else None for k, rec in records.items()}
        st["failed"] += sum(1 for r in todo if out[r.key] is None)
        return out

    def ask(self, role: str, prompts: Mapping[K, Mapping[str, Any]], desc: str | None = None,
            fmt: str | None = None) -> dict[K, Any]:
        """:meth:`run` of one :meth:`request` per name (``prompts``: name -> its prompt keywords):
        name -> parsed output (None where it failed)."""
        requests = {name: self.request(role, fmt=fmt, **prompt) for name, prompt in prompts.items()}
        out = self.run(role, list(requests.values()), desc)
        return {name: out[r.key] for name, r in requests.items()}

    def close(self) -> None:
        self._pool = None
        self._pools.close()
        self._generators.clear()
