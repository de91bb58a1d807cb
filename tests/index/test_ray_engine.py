"""The Ray Data engine on real photos: same vectors and retrieval as the local engine, default local
start, joining a cluster by address, and resuming after the driver is killed (real processes)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from unirag import Index
from unirag.data.mbeir import read_queries
from unirag.retrieval.retriever import Retriever


@pytest.fixture(scope="module")
def local_index(demo_mbeir, demo_images, tiny_encoder_spec, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "idx"
    Index.build(demo_mbeir["pool"], out, encoder=tiny_encoder_spec, images_root=demo_images, progress=False)
    return out


def _assert_same_index(a_dir: Path, b_dir: Path, demo_mbeir, demo_images) -> None:
    a, b = Index.open(a_dir), Index.open(b_dir)
    dids = [m.did for m in a.metas]
    assert len(dids) == 306 and sorted(dids) == sorted(m.did for m in b.metas)
    delta = np.abs(a.vectors([a.gid_of(d) for d in dids]) - b.vectors([b.gid_of(d) for d in dids]))
    assert delta.max() <= 1e-5
    for name, modality in (("i2t", "text"), ("t2i", "image")):
        queries = read_queries(demo_mbeir[name])
        ra = Retriever(a).retrieve(queries, 5, modality, query_images_root=demo_images)
        rb = Retriever(b).retrieve(queries, 5, modality, query_images_root=demo_images)
        assert [[c.did for c in r] for r in ra] == [[c.did for c in r] for r in rb]
        assert [[(p.image_did, p.text_did) for p in r.pairs] for r in ra] == \
            [[(p.image_did, p.text_did) for p in r.pairs] for r in rb]


@pytest.mark.ray  # starts a local Ray itself: the behaviour under test
def test_default_local_ray_equals_local_engine(local_index, demo_mbeir, demo_images, tiny_encoder_spec,
                                               tmp_path: Path) -> None:
    """No address: a local Ray is started with the default worker sizing (must not hang on 2 CPUs)."""
    import ray

    out = tmp_path / "idx"
    manifest = Index.build(demo_mbeir["pool"], out, encoder=tiny_encoder_spec, images_root=demo_images,
                           engine="ray", shard_size=60, progress=False).manifest
    assert not ray.is_initialized(), "the local Ray started for the build is shut down afterwards"
    assert manifest["total"] == 306
    assert sorted(p.name for p in (out / "shards").glob("*.done.json")) == [f"shard-0000{i}.done.json"
                                                                            for i in range(6)]
    _assert_same_index(local_index, out, demo_mbeir, demo_images)


def test_join_cluster_and_resume_after_a_kill(ray_cluster, local_index, demo_mbeir, demo_images, tiny_encoder_spec,
                                              tmp_path: Path) -> None:
    address, env = ray_cluster
    out = tmp_path / "idx"
    shards = out / "shards"
    cmd = [str(Path(sys.executable).with_name("unirag")), "index", "build", "--pool", str(demo_mbeir["pool"]),
           "--images-root", str(demo_images), "--out", str(out), "--encoder", tiny_encoder_spec,
           "--engine", "ray", "--ray-address", address, "--shard-size", "25", "--workers", "1",
           "--batch-size", "4"]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while len(list(shards.glob("*.done.json"))) < 2:
        assert first.poll() is None, "the build ended before it could be killed"
        assert time.time() < deadline, "no shard finished in time"
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    done_before = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns)
                   for p in shards.glob("shard-*") if (shards / (p.name.split(".")[0] + ".done.json")).exists()}
    n_done = len(list(shards.glob("*.done.json")))
    assert 2 <= n_done < 13, n_done  # 306 items in shards of 25
    assert not (out / "manifest.json").exists()

    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"shards: {n_done} of 13 already done, embedding {13 - n_done} on Ray" in second.stdout
    for name, stamp in done_before.items():  # finished shards were not embedded again
        p = shards / name
        assert (p.stat().st_ino, p.stat().st_mtime_ns) == stamp, name
    assert len(list(shards.glob("*.done.json"))) == 13
    _assert_same_index(local_index, out, demo_mbeir, demo_images)
