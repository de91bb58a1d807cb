"""Shared fixtures: small real-data slices committed under tests/fixtures (see its ATTRIBUTION.md), the
one Ray cluster of a pytest run, and the test layers (docs/development.md).

The default suite reads nothing outside the repository: ``shared_data_guard`` fails any test that
reads ``../shared`` or ``$UNIRAG_SHARED_DATA``. Tests that need the full data live in tests-data/.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest

import layers
import shared_data_guard

# No test may reach the network: hub libraries fail at once instead of retrying (this also reaches
# the subprocesses tests start), and any connection to a non-loopback address raises.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
_real_connect = socket.socket.connect


def _loopback_only_connect(self, address):
    host = address[0] if isinstance(address, tuple) else None
    if host is not None:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise RuntimeError(f"test tried to reach the network: {address!r}")
    return _real_connect(self, address)


socket.socket.connect = _loopback_only_connect

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SAMPLE = Path(__file__).resolve().parents[1] / "src" / "unirag" / "demo" / "data"


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("shared_data_guard"):
        config.pluginmanager.register(shared_data_guard, "shared_data_guard")
    if not config.pluginmanager.has_plugin("layers"):
        config.pluginmanager.register(layers, "layers")  # its hook names the xdist groups
    shared_data_guard.install()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    layers.apply(items)


@pytest.fixture(scope="session")
def ray_cluster():
    """(address, env for driver subprocesses) of THE Ray cluster of this pytest run (``ray start --head``,
    2 CPUs, 100 MB object store, free ports; tests/ray_cluster.py), shared by every Ray test; the only
    place a test starts Ray (tests/test_layers.py guards it). Under xdist all Ray tests run on one worker."""
    from ray_cluster import ray_head

    with ray_head() as head:
        yield head


@pytest.fixture(scope="session")
def coco_mini(tmp_path_factory) -> Path:
    """51 real COCO val2017 photos with 5 human captions each (captions.jsonl + images/, the demo photos).

    A per-session copy whose ``images/`` is a real folder (hard links, else copies): the committed
    ``tests/fixtures/coco-mini/images`` is a symlink to the demo photos, and an import refuses image
    paths that resolve outside ``--images`` (symlinks included) unless told to allow them.
    """
    import os
    import shutil

    src = FIXTURES / "coco-mini"
    out = tmp_path_factory.mktemp("fixtures") / "coco-mini"
    (out / "images").mkdir(parents=True)
    shutil.copyfile(src / "captions.jsonl", out / "captions.jsonl")
    for photo in sorted((src / "images").resolve().iterdir()):
        try:
            os.link(photo, out / "images" / photo.name)
        except OSError:
            shutil.copyfile(photo, out / "images" / photo.name)
    return out


@pytest.fixture(scope="session")
def myntra() -> Path:
    """112 real fashion product photos with titles and attributes (products.jsonl + images/)."""
    return FIXTURES / "myntra"


@pytest.fixture(scope="session")
def cir_data() -> Path:
    """Slices of the real CIRR, FashionIQ and CIRCO annotation files (no images), same folder layout."""
    return FIXTURES / "cir"


@pytest.fixture(scope="session")
def mbeir_examples() -> Path:
    """The M-BEIR schema notes and 4 real M-BEIR lines (real_examples/)."""
    return FIXTURES / "mbeir"


@pytest.fixture(scope="session")
def demo(tmp_path_factory, worker_id) -> dict[str, Path]:
    """The bundled demo sample (51 real COCO photos, 255 captions): its M-BEIR files and an index built through
    ``unirag.Index.build`` (offline encoder), once per pytest run for the API and the service tests: under
    xdist the first worker to need it builds it in the run's shared temporary folder, under a lock, and the
    others wait for it and read it (tests only read it)."""
    import fcntl

    from unirag.data.importers.coco import import_coco
    from unirag.data.pool import Pool
    from unirag.index.handle import Index

    shared = worker_id != "master"  # the run's folder (pytest-NNN) is shared by its workers only
    root = tmp_path_factory.getbasetemp().parent / "demo" if shared else tmp_path_factory.mktemp("demo")
    root.mkdir(parents=True, exist_ok=True)
    data = root / "data"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "ready").exists():
            import_coco(SAMPLE / "captions.json", SAMPLE / "images", data, show_progress=False)
            Index.build(Pool.read(data / "pool.jsonl", SAMPLE / "images"), root / "index")
            (root / "ready").touch()
    return {"root": root, "data": data, "index": root / "index", "images": SAMPLE / "images",
            "pool": data / "pool.jsonl", "i2t": data / "queries_task3_image2text.jsonl",
            "t2i": data / "queries_task0_text2image.jsonl", "qrels_i2t": data / "qrels_task3.txt",
            "qrels_t2i": data / "qrels_task0.txt"}


@pytest.fixture
def fake_server():
    """A local OpenAI-compatible server (tests/fake_openai_server.py) for the API backends."""
    from fake_openai_server import FakeServer

    with FakeServer() as srv:
        yield srv


@pytest.fixture
def no_api_keys(monkeypatch):
    """No API key or base URL from the developer's environment reaches a test."""
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def decoded_here(monkeypatch) -> list[str]:
    """Names of the image files decoded in this process, in order (the tests of decode-ahead: the model's
    process decodes nothing; forked decode processes count in their own copy of the list)."""
    from unirag.data import images

    seen: list[str] = []
    real = images._decode

    def counting(image, *args, **kwargs):
        if isinstance(image, Path):
            seen.append(image.name)
        return real(image, *args, **kwargs)

    monkeypatch.setattr(images, "_decode", counting)
    return seen
