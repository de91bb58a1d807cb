"""Runs batches of agent calls for one role: cached, concurrent, retried, failures recorded.

The generator for a role is created only when some call is not yet in the cache, so a rerun whose
calls are all cached needs neither the model server nor the weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from unirag.cir.agents import call_agent
from unirag.cir.cache import CallCache, CallRequest, call_key, ok_output
from unirag.cir.config import XRConfig
from unirag.errors import ConfigError
from unirag.messages import Message
from unirag.runs.executor import run_items
from unirag.runs.retry import RetryPolicy

GeneratorFactory = Callable[..., Any]


def default_generator_factory(spec: str, **options: Any):
    from unirag.generators.registry import load_text_generator

    return load_text_generator(spec, **options)


class AgentRunner:
    def __init__(self, config: XRConfig, cache: CallCache, generator_factory: GeneratorFactory | None = None,
                 policy: RetryPolicy | None = None, progress: bool = True) -> None:
        self.config = config
        self.cache = cache
        self.factory = generator_factory or default_generator_factory
        self.policy = policy or RetryPolicy()
        self.progress = progress
        self._generators: dict[str, Any] = {}
        #: role -> {"requested", "called", "cached", "failed"} for the run report
        self.stats: dict[str, dict[str, int]] = {}

    def role(self, role: str):
        rc = self.config.roles.get(role)
        if rc is None:
            raise ConfigError(f"no model configured for the X^R agent role {role!r} (add it under 'roles' or "
                              "'defaults' in the agents YAML)")
        return rc

    def key(self, role: str, messages: list[Message], fmt: str | None = None) -> str:
        return call_key(role, self.role(role).fingerprint(), messages, fmt)

    def request(self, role: str, messages: list[Message], expect_answers: int | None = None,
                fmt: str | None = None) -> CallRequest:
        """The call to make (or find in the cache) for ``role`` with these messages and reply format."""
        return CallRequest(self.key(role, messages, fmt), messages, expect_answers, fmt)

    def _generator(self, role: str):
        rc = self.role(role)
        gen_id = rc.fingerprint()
        if gen_id not in self._generators:  # roles sharing a model share one client / loaded model
            self._generators[gen_id] = self.factory(rc.model, **rc.options)
        return self._generators[gen_id]

    def run(self, role: str, requests: list[CallRequest], desc: str | None = None) -> dict[str, Any]:
        """Make every call not yet cached; return key -> parsed output (None where it failed)."""
        rc = self.role(role)
        store = self.cache.store(role)
        unique = list({r.key: r for r in requests}.values())
        done = store.done_keys()
        todo = [r for r in unique if r.key not in done]
        st = self.stats.setdefault(role, {"requested": 0, "called": 0, "cached": 0, "failed": 0})
        st["requested"] += len(unique)
        st["cached"] += len(unique) - len(todo)
        if todo:
            gen = self._generator(role)
            concurrency = 1 if rc.model.startswith("hf:") else self.config.settings.concurrency
            opts = rc.generation_options()
            attempts = self.config.settings.json_attempts

            def work(req: CallRequest) -> dict[str, Any]:
                return call_agent(gen, role, req.messages, opts, attempts, req.expect_answers, req.fmt)

            counts = run_items(todo, key=lambda r: r.key, work=work, store=store, concurrency=concurrency,
                               policy=self.policy, desc=desc or role, progress=self.progress)
            st["called"] += counts["ok"] + counts["error"]
        out = {r.key: ok_output(store.get(r.key)) for r in unique}
        st["failed"] += sum(1 for r in todo if out[r.key] is None)
        return out

    def errors(self, role: str, keys: list[str]) -> list[str]:
        store = self.cache.store(role)
        return [str((store.get(k) or {}).get("error")) for k in keys if ok_output(store.get(k)) is None]

    def close(self) -> None:
        for g in self._generators.values():
            close = getattr(g, "close", None)
            if close is not None:
                close()
        self._generators.clear()
