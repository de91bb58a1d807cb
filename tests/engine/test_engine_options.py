"""Engine options without starting Ray: bad combinations fail with one clear line, API backends stay
local under ``--engine ray`` and say so, and a batch that runs out of GPU memory fails only the item
that is too big on its own."""

from __future__ import annotations

import logging

import pytest

from unirag.errors import ConfigError
from unirag.runs.engine import EngineOptions, runs_on_ray


def test_bad_engine_options_are_config_errors():
    with pytest.raises(ConfigError, match="go with --engine ray"):
        EngineOptions(engine="local", workers=2)
    with pytest.raises(ConfigError, match="unknown engine"):
        EngineOptions(engine="spark")
    with pytest.raises(ConfigError, match="--workers must be >= 1"):
        EngineOptions(engine="ray", workers=0)


def test_cli_refuses_workers_without_ray(tmp_path, capsys):
    from cli_capture import main_result

    code, _, err = main_result(["caption", "--queries", str(tmp_path / "q.jsonl"), "--out", str(tmp_path / "o"),
                                "--workers", "2"], capsys)
    assert code == 2 and "go with --engine ray" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_api_and_retrieval_backends_run_locally_and_say_so(caplog):
    with caplog.at_level(logging.WARNING, logger="unirag.runs.engine"):
        assert runs_on_ray("ray", "openai:gpt-4o") is False
        assert runs_on_ray(EngineOptions(engine="ray"), "retrieval:top1") is False
    assert "openai:gpt-4o is not a local model" in caplog.text and "retrieval:top1" in caplog.text
    assert runs_on_ray("ray", "hf:/models/llava") and runs_on_ray("ray", "diffusers:/models/sd")
    assert not runs_on_ray("local", "hf:/models/llava")


def test_caption_with_api_backend_and_engine_ray_runs_locally(coco_caption_set, tmp_path, no_api_keys, caplog):
    """No Ray is started for an API backend (this test would hang or fail without a cluster otherwise)."""
    from fake_openai_server import FakeServer, Reply
    from unirag.pipelines.caption import CaptionConfig, run_captioning

    with FakeServer(responder=lambda req: Reply.chat("a caption")) as srv, \
            caplog.at_level(logging.WARNING, logger="unirag.runs.engine"):
        cfg = CaptionConfig(queries=coco_caption_set["queries"], generator="openai:gpt-4o", out=tmp_path / "o",
                            mode="zero-shot", images_root=coco_caption_set["images_root"], limit=3,
                            generator_options={"base_url": srv.url}, engine="ray", progress=False)
        result = run_captioning(cfg)
    assert result["counts"]["ok"] == 3 and "not a local model" in caplog.text


def test_out_of_memory_batch_is_retried_item_by_item(tmp_path):
    from unirag.runs.executor import run_items
    from unirag.runs.retry import RetryPolicy
    from unirag.runs.store import ResultStore

    class OutOfMemoryError(RuntimeError):  # what torch raises (matched by name, torch is not needed)
        pass

    calls = []

    def work_batch(items):
        calls.append(list(items))
        if len(items) > 1 or items[0] == "big":
            raise OutOfMemoryError("CUDA out of memory")
        return [{"v": items[0]}]

    with ResultStore(tmp_path / "out.jsonl") as store:
        counts = run_items(["a", "big", "c"], key=str, work=work_batch, store=store, batch_size=3,
                           policy=RetryPolicy(max_attempts=1), progress=False)
        recs = {r["qid"]: r for r in store.records()}
    assert counts == {"ok": 2, "error": 1, "skipped": 0}
    assert calls == [["a", "big", "c"], ["a"], ["big"], ["c"]]
    assert recs["big"]["status"] == "error" and recs["big"]["error_kind"] == "oom"
    assert recs["a"]["v"] == "a" and recs["c"]["status"] == "ok"


def test_other_exceptions_in_a_batch_are_bugs_and_propagate(tmp_path):
    from unirag.runs.executor import run_items
    from unirag.runs.store import ResultStore

    def work_batch(items):
        raise KeyError("a bug")

    with ResultStore(tmp_path / "out.jsonl") as store, pytest.raises(KeyError):
        run_items(["a", "b"], key=str, work=work_batch, store=store, batch_size=2, progress=False)


class _FakeRay:
    """Records how actors are requested (no GPU here): the resources and the device each worker gets."""

    def __init__(self, resources):
        self.resources, self.requested, self.started, self.decode_workers = resources, [], [], []

    def cluster_resources(self):
        return dict(self.resources)

    def available_resources(self):
        return dict(self.resources)

    def remote(self, cls):
        fake = self

        class _Options:
            def options(self, **kw):
                fake.requested.append(kw)
                return self

            def remote(self, recipe, device, threads, decode_workers):
                fake.started.append((device, threads))
                fake.decode_workers.append(decode_workers)
                model = {"spec": recipe.spec}  # what the worker's ask(recipe.describe) reports
                return type("Actor", (), {"ask": type("M", (), {"remote": staticmethod(lambda q: model)})()})()

        return _Options()

    def get(self, values, timeout=None):
        return values


def test_gpus_per_worker_reserves_ray_gpus_and_puts_each_model_on_its_gpu(monkeypatch):
    """--gpus-per-worker G: each actor asks Ray for num_gpus=G (Ray then sets its CUDA_VISIBLE_DEVICES),
    loads the model on "cuda" (its own GPU), and the default worker count is GPUs / G. Actors are
    threaded (the driver's next call decodes its images while the model works) and by default each
    GPU actor decodes in the CPUs per actor less one, a CPU-only one inline."""
    from unirag.pipelines.remote_models import ModelRecipe
    from unirag.runs.engine import WorkerPool

    fake = _FakeRay({"CPU": 16, "GPU": 4})
    pool = WorkerPool(EngineOptions(engine="ray", gpus_per_worker=2, ray_address="head:6379"))
    monkeypatch.setattr(pool, "_connect", lambda: fake)
    pool.ray = fake
    assert pool.describe(ModelRecipe("hf:/models/llava")) == {"spec": "hf:/models/llava"}
    assert fake.requested == [{"num_cpus": 1, "num_gpus": 2, "max_restarts": 0, "max_task_retries": 0,
                               "max_concurrency": 3}]
    assert fake.started == [("cuda", None), ("cuda", None)]  # 4 GPUs / 2 per worker; cluster: Ray's threads
    assert fake.decode_workers == [7, 7]  # 16 CPUs / 2 actors, less one each

    cpu = _FakeRay({"CPU": 2})
    pool = WorkerPool(EngineOptions(engine="ray"))
    monkeypatch.setattr(pool, "_connect", lambda: cpu)
    pool.ray = cpu
    pool.describe(ModelRecipe("python:m:f"))
    assert cpu.requested[0]["num_gpus"] == 0 and [d for d, _ in cpu.started] == ["cpu", "cpu"]
    assert cpu.decode_workers == [0, 0]  # CPU-only actors decode inline

    explicit = _FakeRay({"CPU": 2})
    pool = WorkerPool(EngineOptions(engine="ray", decode_workers=1))
    monkeypatch.setattr(pool, "_connect", lambda: explicit)
    pool.ray = explicit
    pool.describe(ModelRecipe("python:m:f"))
    assert explicit.decode_workers == [1, 1]


def test_decode_workers_reach_the_engine_options_from_every_command_with_an_engine(monkeypatch):
    """``--decode-workers`` of caption, generate-images and cir becomes ``EngineOptions.decode_workers``
    (the run manifest's engine entry records it); a negative count is refused."""
    from click.testing import CliRunner

    from unirag.cir import api
    from unirag.cli import caption_cmd, cir_cmd, generate_images_cmd
    from unirag.pipelines import caption, image_gen

    seen = []

    def spy(cfg=None, **kwargs):
        seen.append(kwargs["engine"] if cfg is None else cfg.engine)
        raise SystemExit(0)

    for where, name in ((caption, "run_captioning"), (image_gen, "run_images"), (api, "run_cir")):
        monkeypatch.setattr(where, name, spy)
    for module, args in ((caption_cmd, ["--queries", "q.jsonl", "--out", "o"]),
                         (generate_images_cmd, ["--queries", "q.jsonl", "--generator", "diffusers:x", "--out", "o"]),
                         (cir_cmd, ["--dataset", "cirr", "--annotations", "a.json", "--images-root", ".",
                                    "--out", "o"])):
        command = next(v for v in vars(module).values() if hasattr(v, "params") and hasattr(v, "callback"))
        result = CliRunner().invoke(command, [*args, "--engine", "ray", "--decode-workers", "3"])
        assert result.exit_code == 0, (module.__name__, result.output)
    assert [o.decode_workers for o in seen] == [3, 3, 3] and all(o.ray for o in seen)
    assert EngineOptions(engine="ray", decode_workers=3).decode_workers == 3
    with pytest.raises(ConfigError, match="decode workers must be >= 0"):
        EngineOptions(engine="ray", decode_workers=-1)
