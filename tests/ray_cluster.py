"""A real ``ray start --head`` for the tests that join a cluster by address (index build, generation runs):
the one cluster of a pytest run, the ``ray_cluster`` fixture of tests/conftest.py.

Started on free ports with a private temp dir, 2 CPUs and a small object store (this machine has 2
cores and other jobs); the whole process group is stopped afterwards (never ``ray stop``, which
would stop other users' Ray too). Workers import from ``src`` and ``tests`` (the test plugins).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
SRC = str(Path(TESTS).parent / "src")
OBJECT_STORE_BYTES = 100 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _reload_auth_config() -> None:
    """Ray reads its auth settings once per process; make an already imported Ray read them again."""
    raylet = sys.modules.get("ray._raylet")
    if raylet is None:
        return
    with contextlib.suppress(AttributeError):
        raylet.Config.initialize("")
        raylet.AuthenticationTokenLoader.instance().reset_cache()


@contextlib.contextmanager
def private_token(path: Path) -> Iterator[None]:
    """Ray in this process authenticates with the token in ``path`` (written if missing): Ray >= 2.5x
    keeps one in ~/.ray/auth_token by default, which other Ray clusters started on this machine (other
    test runs) may replace under our feet."""
    path = Path(path)
    if not path.exists():
        path.write_text(secrets.token_hex(32))
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)
    _reload_auth_config()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _reload_auth_config()


def cluster_cpus(address: str, env: dict[str, str]) -> tuple[float, float] | None:
    """(free, total) CPUs of the cluster at ``address``, asked by a short-lived driver; None if it cannot join."""
    probe = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address={address!r}, logging_level='ERROR'); "
                            "print(ray.available_resources().get('CPU', 0), ray.cluster_resources().get('CPU', 0))"],
                           env=env, capture_output=True, text=True, timeout=90)
    if probe.returncode != 0 or len(probe.stdout.split()) < 2:
        return None
    free, total = probe.stdout.split()[-2:]
    return float(free), float(total)


def wait_until_idle(address: str, env: dict[str, str], timeout: float = 180) -> None:
    """Until every CPU of the cluster is free: the workers of a killed driver die with it, but Ray releases
    their CPUs only once it has seen them go, and a rerun started before then waits for workers it cannot
    place (a resume test once hung 400 s in a full run, never alone)."""
    deadline = time.monotonic() + timeout
    while (cpus := cluster_cpus(address, env)) is None or cpus[0] < cpus[1]:
        if time.monotonic() > deadline:
            raise AssertionError(f"the cluster's CPUs (free, total) are still {cpus} after {timeout:.0f} s: "
                                 "the killed driver's workers were not released")
        time.sleep(1)


@contextlib.contextmanager
def ray_head(num_cpus: int = 2) -> Iterator[tuple[str, dict[str, str]]]:
    """Yield (address, env for driver subprocesses) of a running head node; while it runs, this
    process's environment carries the cluster's auth token settings too."""
    port = free_port()
    temp_dir = tempfile.mkdtemp(prefix="urray", dir="/tmp")
    token = Path(temp_dir) / "auth_token"  # see private_token
    token.write_text(secrets.token_hex(32))
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS]), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", **auth}
    ray_bin = str(Path(sys.executable).with_name("ray"))
    # Every port Ray would otherwise take at a fixed default (the dashboard agent's 52365, ...) is a free one
    # too: two test runs on one machine (two checkouts) never share a cluster's port. (No client server:
    # it needs ray[client], which the ray extra does not install.)
    ports = [f"--{name}={free_port()}" for name in ("dashboard-port", "dashboard-agent-listen-port",
                                                    "dashboard-agent-grpc-port",
                                                    "runtime-env-agent-port", "metrics-export-port",
                                                    "node-manager-port", "object-manager-port")]
    head = subprocess.Popen([ray_bin, "start", "--head", f"--port={port}", *ports, f"--num-cpus={num_cpus}",
                             f"--temp-dir={temp_dir}", f"--object-store-memory={OBJECT_STORE_BYTES}",
                             "--include-dashboard=false", "--disable-usage-stats", "--block"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.time() + 300  # a shared 2-core machine can be slow to start Ray
        while time.time() < deadline:
            if head.poll() is not None:
                raise RuntimeError("ray start --head exited")
            cpus = cluster_cpus(address, env)
            if cpus is not None and cpus[1] == num_cpus:
                break
            time.sleep(1)
        else:
            raise RuntimeError("Ray head did not come up")
        with private_token(token):  # drivers in this process (ray.init(address=...)) authenticate too
            yield address, env
    finally:
        head.terminate()
        try:
            head.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)  # anything the head left in its own process group
        head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)
