"""A Ray run saves the prompts a local run saves: the driver's stand-in (``RemoteModel``) has no
model, so it asks a worker (``WorkerPool.ask`` -> ``_Worker.ask``) for the model's wire form of each saved
prompt. Here the actor class is called in this process, as Ray calls it; the question travels pickled."""

from __future__ import annotations

import functools
import json
import pickle

from unirag.generators.base import GenerationOptions
from unirag.generators.registry import load_generator
from unirag.messages import ImagePart, Message, TextPart, render_for_log
from unirag.pipelines.remote_models import ModelRecipe, RemoteModel, sent_prompt_of
from unirag.runs.engine import _Worker


def test_the_stand_in_saves_the_workers_wire_form(coco_mini, monkeypatch, no_api_keys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-written")
    recipe = ModelRecipe("openai:gpt-4o", {"base_url": "http://127.0.0.1:9/v1"})
    worker = _Worker(recipe, "cpu", None)
    asked = []

    def ask(question):  # what WorkerPool.ask does, minus Ray: the question pickled to the worker
        asked.append(question)
        return worker.ask(pickle.loads(pickle.dumps(question)))

    stand_in = RemoteModel(recipe.describe(worker.model), ask=ask)
    image = sorted((coco_mini / "images").iterdir())[0]
    messages = [Message("user", [TextPart("Caption this."), ImagePart(path=image)])]
    options = GenerationOptions(max_tokens=7)
    sent = stand_in.sent_prompt(messages, options)
    local = load_generator("openai:gpt-4o", base_url="http://127.0.0.1:9/v1")
    assert sent == local.sent_prompt(messages, options) != render_for_log(messages)
    body = json.loads(sent)
    assert body["max_tokens"] == 7 and "sk-test" not in sent and len(asked) == 1
    assert isinstance(asked[0], functools.partial) and asked[0].func is sent_prompt_of
    # a model that shows no wire form answers None (nothing written), as a local run of it
    assert sent_prompt_of(messages, options, object()) is None
    # without a worker to ask (a described model only): the rendered messages
    assert RemoteModel(recipe.describe(worker.model)).sent_prompt(messages, options) == render_for_log(messages)


def test_a_dead_worker_is_skipped_and_none_left_is_one_line():
    """``WorkerPool.ask`` goes to the next live worker when one died; with none left it says so in one
    line (not Ray's traceback). A fake ``ray`` stands in: only its ``get`` and exception classes are used."""
    import types

    import pytest

    from unirag.errors import UniragError
    from unirag.runs.engine import WorkerPool, _Group

    class ActorDied(Exception):
        pass

    class TaskFailed(Exception):
        pass

    class Actor:
        def __init__(self, alive):
            self.alive = alive
            self.ask = types.SimpleNamespace(remote=lambda q: (self, q))

    def get(ref):
        actor, question = ref
        if not actor.alive:
            raise ActorDied()
        return question("model")

    pool = object.__new__(WorkerPool)
    pool.ray = types.SimpleNamespace(get=get, exceptions=types.SimpleNamespace(RayActorError=ActorDied,
                                                                               RayTaskError=TaskFailed))
    group = _Group(actors=[Actor(False), Actor(True)], model={}, last_used=0.0)
    pool.group = lambda recipe: group
    assert pool.ask("recipe", lambda model: f"asked {model}") == "asked model"
    assert group.dead == {0}
    group.actors[1].alive = False
    with pytest.raises(UniragError, match="every Ray worker died"):
        pool.ask("recipe", lambda model: model)
    assert group.dead == {0, 1}
