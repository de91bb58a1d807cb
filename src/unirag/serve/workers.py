"""``unirag serve --workers N``: N processes behind one port, each a whole service (model, batches, limits).

Why not uvicorn's own workers: they share one listening socket, and asyncio accepts every connection that
is waiting when it wakes, so the first worker to wake takes a whole burst of keep-alive clients (all 16 of
16 in one bench run) while the others idle. Here, on Linux, every worker listens on a socket of its own
with ``SO_REUSEPORT``, and the kernel spreads new connections over them by a hash of the client's address
and port. A worker listens only once its model is loaded, so no connection waits on one still starting;
the parent holds the port (bound, not listening) for the whole run, so a worker started again gets it back.

A worker that cannot start (a bad index or generator) stops the service, which ``unirag serve`` reports as
one error line; a worker that dies later is started again.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from multiprocessing.connection import wait
from pathlib import Path

from unirag.errors import ConfigError, UniragError
from unirag.serve.settings import ServeSettings

log = logging.getLogger("unirag.serve")

#: One listening socket per worker (balanced by the kernel) where the platform spreads connections over
#: sockets sharing a port; elsewhere the workers accept from one socket the parent listens on.
SPREAD = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def tcp_socket(host: str, port: int, share: bool = SPREAD) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not listening yet), with ``share`` one that the other workers'
    sockets can join (``SO_REUSEPORT``). Created with ``IPPROTO_TCP`` so that asyncio turns Nagle's
    algorithm off on its connections (a socket made with protocol 0 keeps it, and every answer then waits
    ~40 ms for the client's delayed ACK)."""
    family, _, _, _, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM,
                                                  flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if share:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def run_workers(settings: ServeSettings, log_level: str) -> None:
    """Run ``settings.workers`` worker processes until SIGINT/SIGTERM. torch's and FAISS's OpenMP teams are
    sized to each process's share of the cores (spare threads would spin on the other processes' cores);
    /metrics sums over all of them (prometheus_client's multiprocess mode)."""
    from unirag.runtime import available_cores

    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, available_cores() // settings.workers)))
    # The port must be free: a socket with SO_REUSEPORT would join another service's sockets on it (a
    # second `unirag serve` on the same port would share the connections). Bound without it first, the
    # port is refused when taken; once the shared sockets hold it, a plain bind elsewhere is refused.
    tcp_socket(settings.host, settings.port, share=False).close()
    held = tcp_socket(settings.host, settings.port)
    if not SPREAD:
        held.listen(2048)
    stop: list[int] = []
    handlers = {sig: signal.signal(sig, lambda number, _: stop.append(number)) for sig in (signal.SIGINT, signal.SIGTERM)}
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: torch's threads are not forked
    with tempfile.TemporaryDirectory(prefix="unirag-serve-") as folder:
        metrics, failed = Path(folder) / "metrics", Path(folder) / "startup-error.txt"
        metrics.mkdir()
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)

        def start() -> multiprocessing.Process:
            process = context.Process(target=_worker, name="unirag-serve-worker", daemon=False,
                                      args=(settings.to_json(), log_level, str(failed), None if SPREAD else held))
            process.start()
            return process

        workers = [start() for _ in range(settings.workers)]
        try:
            while not stop and not failed.exists():
                wait([w.sentinel for w in workers], timeout=0.5)
                for i, worker in enumerate(workers):
                    if worker.exitcode is not None and not stop and not failed.exists():
                        log.warning("worker process %s ended (exit %s); starting another", worker.pid, worker.exitcode)
                        time.sleep(1.0)  # not a tight loop if it keeps dying
                        workers[i] = start()
        finally:
            for worker in workers:
                if worker.exitcode is None:
                    worker.terminate()  # uvicorn finishes the requests in flight
            for worker in workers:
                worker.join(30)
                if worker.exitcode is None:
                    worker.kill()
            held.close()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        if failed.exists():
            raise ConfigError(failed.read_text())


def _worker(settings_json: str, log_level: str, failed: str, shared: socket.socket | None) -> None:
    """One worker process: the app first, then the socket, then uvicorn until SIGTERM."""
    from unirag.serve.app import create_app

    settings = ServeSettings.from_json(settings_json)
    try:
        app = create_app(settings)
        sock = shared if shared is not None else tcp_socket(settings.host, settings.port)
    except Exception as e:  # noqa: BLE001 - any failure to start is reported by the parent, once
        Path(failed).write_text(str(e) if isinstance(e, UniragError) else f"{type(e).__name__}: {e}")
        os._exit(2)
    threading.Thread(target=_stop_with_parent, name="unirag-parent-watch", daemon=True).start()
    serve_on(sock, app, log_level)


def _stop_with_parent() -> None:
    """A parent killed outright (SIGKILL, OOM) cannot stop its workers: each stops itself, as on SIGTERM,
    when the parent's end of the spawn pipe closes, so no orphan keeps answering on the port."""
    wait([multiprocessing.parent_process().sentinel])
    os.kill(os.getpid(), signal.SIGTERM)


def serve_on(sock: socket.socket, app, log_level: str) -> None:
    """Answer on ``sock`` (bound; listened on here if not yet) with uvicorn until SIGINT/SIGTERM: the one
    place a process of ``unirag serve``, single or one of N, runs its server."""
    import uvicorn

    sock.listen(2048)  # listening twice only sets the backlog again
    try:
        uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[sock])
    except KeyboardInterrupt:  # Ctrl-C reaches every process of the group; uvicorn raises it again once stopped
        pass
