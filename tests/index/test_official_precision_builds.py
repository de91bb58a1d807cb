"""``uniir_precision = official`` reaches every index build that encodes: local, Ray workers and ``--shard``
(float32 weights under float16 autocast, as UniIR embeds: TIGER-AI-Lab/UniIR
src/models/uniir_clip/clip_scorefusion/configs_scripts/large/eval/unirag/embed.yaml@98dc570:77 ``use_fp16:
true``, src/common/mbeir_embedder.py@98dc570:52-53, :138-139); ``--embeddings`` encodes nothing."""

from __future__ import annotations

import pytest

from tiny_models import tiny_uniir_clip_sf
from unirag.cli.main import main
from unirag.data.mbeir import write_candidates
from unirag.data.records import Candidate, Modality
from unirag.encoders import registry
from unirag.errors import ConfigError


@pytest.fixture
def build(tmp_path, monkeypatch):
    """(argv prefix of ``unirag index build --profile official`` on a 4-caption pool, the loads it made)."""
    pool = tmp_path / "pool.jsonl"
    write_candidates(pool, [Candidate(did=f"t{i}", modality=Modality.TEXT, txt=f"a dog number {i}") for i in range(4)])
    loads = []
    real = registry.load_encoder

    def recording(spec=None, **kwargs):
        loads.append((kwargs.get("dtype"), kwargs.get("autocast")))
        return real(spec, **kwargs)

    monkeypatch.setattr(registry, "load_encoder", recording)
    argv = ["index", "build", "--pool", str(pool), "--encoder", f"uniir:clip_sf:{tiny_uniir_clip_sf()}", "--profile", "official",
            "--device", "cpu"]
    return argv, loads


def _main(argv):
    try:
        main(argv)
    except SystemExit as e:
        assert e.code in (0, None), e.code


def test_local_and_shard_builds_load_float32_under_float16_autocast(build, tmp_path):
    argv, loads = build
    _main([*argv, "--out", str(tmp_path / "idx")])
    _main([*argv, "--shard", "0/1", "--shards-dir", str(tmp_path / "shards")])
    assert loads == [("float32", "float16"), ("float32", "float16")]
    loads.clear()
    _main([*argv, "--out", str(tmp_path / "mine"), "--dtype", "float32"])  # an explicit --dtype wins
    assert loads == [("float32", None)]


def test_an_embeddings_build_says_the_precision_setting_did_not_apply(build, tmp_path, capsys):
    import numpy as np

    argv, loads = build
    vectors = tmp_path / "v.npy"
    np.save(vectors, np.eye(4, 16, dtype=np.float32))  # the tiny encoder has 16 dimensions
    _main([*argv, "--out", str(tmp_path / "idx"), "--embeddings", str(vectors)])
    err = capsys.readouterr().err
    assert "--embeddings encodes nothing" in err
    _main([*argv[:-4], "--device", "cpu", "--out", str(tmp_path / "idx2"), "--embeddings", str(vectors)])
    assert "encodes nothing" not in capsys.readouterr().err  # the default profile: nothing to say


def test_ray_workers_get_the_official_precision(build, tmp_path, monkeypatch):
    import contextlib
    from types import SimpleNamespace

    from unirag import ray_support
    from unirag.index import ray_engine

    asked = []

    def map_batches(worker, **kwargs):
        load = kwargs["fn_constructor_kwargs"]["load"]
        asked.append((load["dtype"], load["autocast"]))
        raise ConfigError("stopped before Ray")

    ray = SimpleNamespace(cluster_resources=lambda: {"CPU": 2},
                          data=SimpleNamespace(DataContext=SimpleNamespace(get_current=SimpleNamespace),
                                               from_items=lambda *a, **k: SimpleNamespace(map_batches=map_batches)))
    monkeypatch.setattr(ray_support, "ray_session", lambda *a, **k: contextlib.nullcontext(ray))
    argv, loads = build
    with pytest.raises(SystemExit) as e:
        main([*argv, "--out", str(tmp_path / "idx"), "--engine", "ray", "--shards-dir", str(tmp_path / "shards")])
    assert e.value.code == 2 and asked == [("float32", "float16")] and loads == [("float32", "float16")]
    # the worker (the Ray actor class, called here) loads its encoder that way
    worker = ray_engine._ShardWorker(str(tmp_path / "shards"), f"uniir:clip_sf:{tiny_uniir_clip_sf()}", None, 4,
                                     None, {"device": "cpu", "dtype": "float32", "autocast": "float16",
                                            "decode_workers": 0})
    assert worker.embed.keywords["encoder"].autocast_dtype == "float16" and loads[-1] == ("float32", "float16")
