"""``unirag serve``: the REST API and web page over one index (FastAPI on uvicorn)."""

from __future__ import annotations

from dataclasses import fields
from functools import partial

import click

from unirag.cli.options import index_memory_option
from unirag.errors import ConfigError
from unirag.serve.settings import ServeSettings

#: The options' defaults are ServeSettings' (the one place each is set).
_DEFAULT = {f.name: f.default for f in fields(ServeSettings)}


@click.command("serve")
@click.option("--index", required=True, type=click.Path(file_okay=False), help="Index directory to search.")
@click.option("--generator", default=_DEFAULT["generator"], show_default=True,
              help="Caption generator: openai:MODEL, gemini:MODEL, hf:DIR, retrieval:top1, retrieval:consensus.")
@click.option("--image-generator", default=_DEFAULT["image_generator"], show_default=True,
              help="Image generator: diffusers:DIR, openai-image:MODEL, gemini-image:MODEL, retrieval:top1.")
@click.option("--cir-agents", type=click.Path(dir_okay=False), default=None,
              help="X^R agents YAML for /v1/cir (default: the embedding baseline).")
@click.option("--host", default=_DEFAULT["host"], show_default=True,
              help="Address to bind; a non-loopback address needs --token-env.")
@click.option("--port", type=int, default=_DEFAULT["port"], show_default=True)
@click.option("--token-env", default=None, metavar="VAR",
              help="Environment variable holding a bearer token that every API request must send.")
@click.option("--cors-origin", "cors_origins", multiple=True, metavar="ORIGIN",
              help="Allow cross-origin requests from ORIGIN (repeatable; CORS is off without it).")
@click.option("--max-upload-mb", type=float, default=_DEFAULT["max_upload_bytes"] / 2**20, show_default=True,
              help="Largest accepted upload.")
@click.option("--max-pixels", type=int, default=_DEFAULT["max_pixels"], show_default=True,
              help="Largest accepted image (width x height); bigger ones are refused as decompression bombs.")
@click.option("--max-decodes", type=int, default=_DEFAULT["max_decodes"], show_default=True,
              help="Uploaded images decoded at once; 16 more per slot wait, beyond that requests get 503.")
@click.option("--concurrency", "generator_concurrency", type=int, default=_DEFAULT["generator_concurrency"],
              show_default=True, help="Generator calls in flight at once.")
@click.option("--max-attempts", type=int, default=_DEFAULT["max_attempts"], show_default=True,
              help="Tries per generator call for transient errors (429, 5xx, timeouts).")
@click.option("--base-url", default=None, help="Generator API base URL (OpenAI-compatible server).")
@click.option("--timeout", type=float, default=None, help="Seconds per generator call.")
@click.option("--prompt-family", "family", type=click.Choice(["llava", "gpt4o", "gemini"]), default=None,
              help="Override the caption generator's prompt template family.")
@click.option("--similarity", type=click.Choice(["minilm", "lexical"]), default=None,
              help="retrieval:consensus caption similarity.")
@click.option("--workers", type=int, default=_DEFAULT["workers"], show_default=True,
              help="Processes answering requests, each with its own model copy and batches and an equal share of "
                   "the CPU cores; on a CPU, 2 lets one encode while the other runs its Python (HTTP, pairs).")
@click.option("--device", default=_DEFAULT["device"], show_default=True,
              help="Where the query encoder and local generator models run: auto (CUDA when available), cpu, cuda:1.")
@partial(index_memory_option, default=_DEFAULT["index_memory"],
         extra="; auto: ram when the FAISS files take at most half the memory available, else mmap")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info", "debug"]), default="info",
              show_default=True)
def serve(max_upload_mb, base_url, timeout, family, similarity, log_level, **opts) -> None:
    """Serve search, RAG captioning, image generation and composed retrieval over HTTP, with a web page at /."""
    gen_opts = {k: v for k, v in (("base_url", base_url), ("timeout", timeout), ("family", family),
                                  ("similarity", similarity)) if v is not None}
    if opts["device"] != "auto":  # local generator models on the same device; "auto" leaves each its default
        gen_opts["device"] = opts["device"]
    opts.update(generator=opts["generator"] or None, image_generator=opts["image_generator"] or None,
                cors_origins=list(opts["cors_origins"]))
    settings = ServeSettings(**opts, max_upload_bytes=int(max_upload_mb * 1024 * 1024),
                             decode_queue=16 * opts["max_decodes"], generator_options=gen_opts)
    settings.check()  # an unsafe bind or a bad limit is refused before the web stack is imported
    host, port = settings.host, settings.port
    try:
        import uvicorn  # noqa: F401 - the serve extra's check, before anything loads

        from unirag.serve.app import create_app
        from unirag.serve.workers import run_workers, serve_on, tcp_socket
    except ImportError as e:
        raise ConfigError(f"unirag serve needs the serve extra ({e.name} is missing): "
                          "pip install 'unirag[serve]'") from None
    app = None
    if settings.workers == 1:  # one process: the port first, so that a port in use is refused before the model loads
        sock = tcp_socket(host, port, share=False)
        app = create_app(settings)
    shown = f"[{host}]" if ":" in host else host
    processes = f"{settings.workers} worker processes; " if app is None else ""
    click.echo(f"unirag serve: http://{shown}:{port}/ ({processes}API docs at /docs, index {settings.index})", err=True)
    if app is not None:
        serve_on(sock, app, log_level)
    else:
        run_workers(settings, log_level)
