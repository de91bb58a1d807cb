"""``unirag.XR``: composed image retrieval (reference image + modification text) from Python.

X^R (paper Algorithm 1) searches a gallery for the image that looks like the reference image
changed as the text says. Without agent models it ranks with the embedding baseline (the reference
image and the text fused, UniIR CLIP-SF style); with agent models (``agents``: an agents YAML like
``examples/xr_agents.yaml`` or an :class:`~unirag.cir.config.XRConfig`) it adds imagination,
coarse filtering and fine filtering. An XR holds the models and settings once: :meth:`XR.search`
ranks in memory (a :class:`~unirag.cir.pipeline.Search`), :meth:`XR.run` writes a benchmark run's
folder around the same search (``unirag cir``). Every agent call and the gallery embeddings are
cached in the work folder, so searching the same gallery again costs only the new query's calls.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from unirag.cir.agent_runner import AgentRunner
from unirag.cir.cache import CallCache
from unirag.cir.config import XRConfig, load_config
from unirag.cir.datasets import CirDataset, CirQuery
from unirag.cir.pipeline import STAGES, Ablation, Search
from unirag.data.images import ImageLike, image_path_of, save_png_by_content
from unirag.errors import ConfigError
from unirag.profiles import Settings
from unirag.retrieval.results import Hit


class XR(contextlib.AbstractContextManager):
    """Training-free multi-agent composed image retrieval.

    ``agents``: agents YAML path, :class:`~unirag.cir.config.XRConfig`, or None (embedding baseline
    only). ``encoder``/``text_encoder``: encoder specs (None: the config's, else the offline default)
    or encoders already loaded. ``work_dir``: where the caches go (default: a temporary folder
    removed by :meth:`close`); ``cache_dir``: the caches' own folder (default WORK_DIR/cache).
    ``k_prime``/``lam``: the paper's candidate depth and fusion weight (override the config).
    ``device``/``dtype``: where and how the encoders run (agent models take theirs from the config).
    ``profile``: ``"default"``, ``"official"`` (the official X^R code's behaviour, docs/xr-parity.md)
    or :class:`~unirag.profiles.Settings` (None: the agents YAML's, else default); ``official_prompts``:
    the folder of one dataset's official prompts (e.g. ``XR/prompts/CIRR`` of your checkout), read
    under ``xr_prompts=official``. ``stages``/``ablation``: what is ranked (paper ablations);
    ``engine``: where local agent models run, "local" or "ray" (see :mod:`unirag.runs.engine`);
    ``echo``: where notices go (None: nowhere).
    """

    def __init__(self, agents: str | Path | XRConfig | None = None, encoder: Any = None, *,
                 text_encoder: Any = None, work_dir: str | Path | None = None, cache_dir: str | Path | None = None,
                 k_prime: int | None = None, lam: float | None = None, device: str | None = "auto",
                 dtype: str | None = "auto", generator_factory=None, progress: bool = False,
                 profile: str | Settings | None = None, official_prompts: str | Path | None = None,
                 stages: str | Sequence[str] = STAGES, ablation: Ablation | None = None, engine: Any = "local",
                 echo: Callable[[str], None] | None = None) -> None:
        parts = [p.strip() for p in (stages.split(",") if isinstance(stages, str) else stages) if p and p.strip()]
        if not parts or any(p not in STAGES for p in parts):
            raise ConfigError(f"stages must be a comma-separated subset of {','.join(STAGES)}, got {stages!r}")
        self.stages = tuple(s for s in STAGES if s in parts)  # in run order
        self.config = load_config(agents, encoder=encoder if isinstance(encoder, str) else None,
                                  official_prompts=official_prompts, k_prime=k_prime, lam=lam)
        if isinstance(text_encoder, str):
            self.config.text_encoder = text_encoder
        self.settings = self.config.resolve_settings(profile)
        self.config.apply_profile_defaults(self.settings)  # e.g. the official CLIP when no encoder is named
        st = self.settings  # setting combinations that have no meaning, refused before any work
        if st["xr_scoring"] == "paper" and st["xr_prompts"] == "official":
            raise ConfigError("xr_scoring=paper needs the paper's two imagined captions (C_t, C_v), but the official "
                              "prompts have no vision imagination agent: use xr_scoring=official or xr_prompts=unirag")
        cap = st["xr_max_statements"]  # none: no cap
        if cap is not None and (not isinstance(cap, int) or cap < 1):
            raise ConfigError(f"xr_max_statements must be a positive integer or none, got {cap!r}")
        for name in ("xr_max_new_tokens", "xr_caption_max_new_tokens"):
            if not isinstance(st[name], int) or st[name] < 1:
                raise ConfigError(f"{name} must be a positive integer, got {st[name]!r}")
        self.ab = ablation or Ablation()
        self._tmp = tempfile.TemporaryDirectory(prefix="unirag-xr-") if work_dir is None else None
        self.work_dir = Path(self._tmp.name if self._tmp is not None else work_dir)
        self.cache = CallCache(cache_dir if cache_dir is not None else self.work_dir / "cache")
        self.factory, self.progress, self.engine = generator_factory, progress, engine
        self.echo = echo or (lambda _line: None)
        self.encoder_options = {"device": device, "dtype": dtype}
        self._encoder = None if isinstance(encoder, str) else encoder
        self._text_encoder = None if isinstance(text_encoder, str) else text_encoder
        self._runner: AgentRunner | None = None

    def warm_up(self) -> XR:
        """Load the cross-modal encoder now."""
        self.encoder()
        return self

    def encoder(self):
        """The cross-modal encoder (loaded on first use)."""
        if self._encoder is None:
            from unirag.encoders.registry import load_encoder

            self._encoder = load_encoder(self.config.encoder, **self.encoder_options)
        return self._encoder

    def text_encoder(self):
        """The encoder of caption-caption similarity (A_t^s: C_t, C_v against candidate captions).

        As in the official X^R code, one CLIP encodes images and captions: when the cross-modal
        encoder is a CLIP-family model it serves here too. Sentence embeddings (all-MiniLM-L6-v2)
        are the fallback for the offline default encoder, or whatever ``text_encoder`` names.
        """
        if self._text_encoder is None:
            from unirag.encoders.offline import OfflineEncoder
            from unirag.encoders.registry import is_offline_name, load_text_encoder

            offline = (isinstance(self._encoder, OfflineEncoder) if self._encoder is not None
                       else is_offline_name(self.config.encoder))
            self._text_encoder = self.encoder() if self.config.text_encoder is None and not offline else \
                load_text_encoder(self.config.text_encoder, device=self.encoder_options.get("device", "auto"))
        return self._text_encoder

    def runner(self) -> AgentRunner:
        """The agent runner: its models (and Ray workers) load once for every search, until :meth:`close`."""
        if self._runner is None:
            self._runner = AgentRunner(self.config, self.cache, self.factory, progress=self.progress,
                                       engine=self.engine)
        return self._runner

    def run(self, dataset: CirDataset, out_dir: str | Path, *, bootstrap: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
        """A benchmark run: the search of ``dataset`` with its folder written around it
        (missing_images.json, rankings.jsonl, metrics.json, manifest.json, submission files); returns
        the metrics. ``bootstrap``: how the metrics' intervals are drawn (``resamples``,
        ``bootstrap_seed``, ``method``; see :func:`unirag.cir.outputs.evaluate`)."""
        from unirag.cir.outputs import write_outputs
        from unirag.runs.atomic import atomic_write_json
        from unirag.runs.store import RunLock

        out = Path(out_dir)
        search = Search(self, dataset)  # a missing official prompt file fails before anything is written
        with RunLock(out):
            pool_missing, ref_missing = search.missing  # listed in the folder, and said, before any image is encoded
            if pool_missing or ref_missing:
                atomic_write_json(out / "missing_images.json", {
                    "images_root": str(dataset.images_root), "pool_missing": pool_missing,
                    "queries_with_missing_reference": ref_missing})
                example = dataset.image_path(pool_missing[0]) if pool_missing else None
                self.echo(f"{len(pool_missing)} of {len(dataset.pool)} pool images and {len(ref_missing)} reference "
                          f"images missing under {dataset.images_root}" + (f" (e.g. {example})" if example else "")
                          + f"; listed in {out / 'missing_images.json'}")
            return write_outputs(search, search.rank(), out, dict(bootstrap or {}))

    def search(self, reference_image: ImageLike, text: str, pool_or_index: Any, *, k: int = 10,
               exclude_reference: bool = True) -> list[Hit]:
        """The top-``k`` gallery images for ``reference_image`` changed as ``text`` says, best first
        (:class:`~unirag.Hit` with the ``stage`` that ranked them and the fine stage's ``scores``).

        ``pool_or_index``: a :class:`unirag.Pool` or :class:`unirag.Index` (their image candidates
        are the gallery), a ``{id: image path}`` mapping, or a list of image paths (ids: the paths).
        ``exclude_reference``: never return the reference image itself (when it is in the gallery).
        """
        return self.search_batch([reference_image], [text], pool_or_index, k=k,
                                 exclude_reference=exclude_reference)[0]

    def search_batch(self, reference_images: Sequence[ImageLike], texts: Sequence[str], pool_or_index: Any, *,
                     k: int = 10, exclude_reference: bool = True) -> list[list[Hit]]:
        """:meth:`search` for several queries over one gallery (agent calls run concurrently)."""
        from unirag.data.pool import Pool
        from unirag.index.handle import Index

        if len(reference_images) != len(texts):
            raise ConfigError(f"search_batch got {len(reference_images)} reference images but {len(texts)} texts")
        if not isinstance(k, int) or k < 1:
            raise ConfigError(f"k must be a positive integer, got {k!r}")
        if isinstance(pool_or_index, Index):
            pool_or_index = pool_or_index.pool
        if isinstance(pool_or_index, Pool):
            gallery = {c.did: str(pool_or_index.image_file(c)) for c in pool_or_index if c.modality.value == "image"}
        elif isinstance(pool_or_index, Mapping):
            gallery = {str(d): str(Path(p).absolute()) for d, p in pool_or_index.items()}
        elif isinstance(pool_or_index, Sequence) and not isinstance(pool_or_index, str):
            gallery = {str(p): str(Path(p).absolute()) for p in pool_or_index}
        else:
            raise ConfigError(f"expected a Pool, an Index, a {{id: path}} mapping or a list of image paths, got "
                              f"{type(pool_or_index).__name__}")
        if not gallery:
            raise ConfigError("the gallery holds no images")
        queries = []
        for i, (image, text) in enumerate(zip(reference_images, texts, strict=True)):
            if not isinstance(text, str) or not text.strip():
                raise ConfigError(f"query {i}: the modification text must be a non-empty string")
            path = image_path_of(image)  # agents send files: the image's own, else a PNG in the work folder
            ref = path.absolute() if path is not None else save_png_by_content(image, self.work_dir / "references")
            ref_id = next((d for d, p in gallery.items() if Path(p) == ref), f"reference:{i}")
            queries.append(CirQuery(qid=f"q{i}", reference=ref_id, text=text, reference_path=str(ref)))
        dataset = CirDataset("xr-search", "mbeir", queries, gallery, exclude_reference=exclude_reference)
        hits = Search(self, dataset).rank().hits(k)
        return [hits[q.qid] for q in queries]

    def close(self) -> None:
        """Release the agent models (and Ray workers) and remove the temporary work folder (when this
        object made one)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __exit__(self, *exc: object) -> None:
        self.close()

    def to_dict(self) -> dict[str, Any]:
        """The configuration (roles, encoders, settings) as recorded in run manifests."""
        return {"config": self.config.manifest(), "settings": self.settings.to_dict(),
                "work_dir": None if self._tmp is not None else str(self.work_dir)}

