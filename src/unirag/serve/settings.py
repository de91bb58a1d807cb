"""What one ``unirag serve`` process is configured with, and the bind-safety rule.

Kept free of FastAPI so the CLI can validate options (and refuse an unsafe bind) before the web
stack is imported.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from unirag.errors import ConfigError
from unirag.profiles import SETTINGS

#: Shortest bearer token accepted: a short one can be guessed by anyone who can reach the port.
MIN_TOKEN_LENGTH = 16


@dataclass
class ServeSettings:
    """Options of one service process (the CLI fills them; tests build them directly)."""

    index: str | Path
    generator: str | None = "retrieval:consensus"
    image_generator: str | None = "retrieval:top1"
    cir_agents: str | Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    #: Name of the environment variable that holds the bearer token (the token itself is never an option).
    token_env: str | None = None
    cors_origins: list[str] = field(default_factory=list)
    #: Upload limits: 10 MB of encoded bytes, 40 megapixels once decoded (a 6300x6300 photo: the
    #: image_max_pixels setting's value).
    max_upload_bytes: int = 10 * 1024 * 1024
    max_pixels: int = SETTINGS["image_max_pixels"].default
    #: Uploads decoded at once, and how many more may wait for a slot before requests get 503. With
    #: the pixel limit this bounds the memory uploads take: a decode holds up to 4 bytes per pixel.
    max_decodes: int = 2
    decode_queue: int = 16
    #: Generator calls in flight at once and tries per call, as in batch runs (--concurrency, --max-attempts).
    generator_concurrency: int = 4
    max_attempts: int = 6
    retry_base_delay: float = 0.5
    #: Options passed to the generator backends (base_url, timeout, family, similarity ...).
    generator_options: dict = field(default_factory=dict)
    #: Most concurrent searches answered by one encoder/FAISS call.
    max_batch: int = 64
    #: Where the query encoder runs ("auto": CUDA when available), as unirag.Retriever takes it.
    device: str = "auto"
    k_max: int = 100
    #: How the index's FAISS files are held: "auto" (read into RAM when they take at most half the
    #: memory available, else memory-mapped), "ram" or "mmap" (see unirag.Index.open).
    index_memory: str = "auto"
    #: Processes answering requests (:mod:`unirag.serve.workers`), each with its own model, batches and
    #: limits and an equal share of the CPU cores for torch. On a CPU one process's Python (HTTP, pair assembly) then runs while
    #: another encodes: one interpreter runs Python on one core at a time (docs/benchmarks.md).
    workers: int = 1

    def to_json(self) -> str:
        """These settings as the worker processes of ``--workers`` read them (:meth:`from_json`)."""
        return json.dumps(asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        return cls(**json.loads(text))

    def token(self) -> str | None:
        """The configured bearer token, read from the environment; None when no --token-env."""
        if not self.token_env:
            return None
        value = os.environ.get(self.token_env, "")
        if not value.strip():
            raise ConfigError(f"--token-env {self.token_env}: the environment variable is not set or empty")
        if len(value.strip()) < MIN_TOKEN_LENGTH:
            raise ConfigError(f"--token-env {self.token_env}: the token has {len(value.strip())} characters; use at "
                              f"least {MIN_TOKEN_LENGTH} (for example the output of "
                              "python -c 'import secrets; print(secrets.token_urlsafe(32))')")
        return value.strip()

    def check(self) -> None:
        """Refuse settings that would expose the service or cannot work, before anything loads.

        An exposed address is refused unless requests must carry a bearer token: anything but
        127.0.0.0/8, ::1 and 'localhost' (0.0.0.0, a LAN address, a host name that may resolve anywhere)."""
        host = self.host
        try:
            loopback = host.strip().lower() == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
        except ValueError:
            loopback = False
        if not self.token() and not loopback:  # token() first: it refuses a bad token on any address
            raise ConfigError(f"refusing to bind {host!r} without a token: anyone on the network could use this "
                              "service. Set a secret in an environment variable and pass --token-env VAR "
                              "(requests then need 'Authorization: Bearer <token>'), or bind 127.0.0.1")
        if self.max_upload_bytes <= 0 or self.max_pixels <= 0 or self.max_decodes < 1 or self.decode_queue < 0:
            raise ConfigError("upload limits must be positive (--max-decodes at least 1)")
        if self.generator_concurrency < 1 or self.max_attempts < 1 or self.max_batch < 1 or self.workers < 1:
            raise ConfigError("--concurrency, --max-attempts, --workers and the batch size must be >= 1")
        if not (0 < int(self.port) < 65536):
            raise ConfigError(f"--port must be in 1..65535, got {self.port}")

