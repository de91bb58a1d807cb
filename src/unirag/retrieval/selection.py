"""Which retrieved pairs become few-shot examples: diversity, true pairs, leakage guard, filters.

The paper retrieves examples by relevance alone ("relevance is the only criterion used while
retrieving candidate pairs"). Relevance alone wastes prompt slots and leaks answers:

* image->text retrieval returns several captions of one photo, so k examples show fewer than k
  photos (``one_per_image``, ``diversity="mmr"``);
* a pool without pairing completes a caption with the *nearest* image, often another photo, while
  M-BEIR's qrels name the right one (``pairs_from``);
* a resized or re-encoded copy of the query photo elsewhere in the pool passes the id-based
  positive exclusion (``near_duplicates``);
* only a modality restriction existed; ``where`` searches within any metadata field (UniIR's local
  pools: ``where={"dataset": "mscoco"}``), inside the FAISS search (see
  :meth:`unirag.Index.topk`).

:class:`Selection` is the one configuration object: CLI options, ``Retriever.search`` keywords and
serve requests all build one, and ``to_dict()`` is recorded in run manifests. :class:`PairPicker`
applies it to one query's pairs, offered in rank order by the retriever.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np

from unirag.data.records import Modality
from unirag.errors import ConfigError
from unirag.profiles import SELECTION_NAMES, Setting
from unirag.retrieval import near_duplicates as nd

DIVERSITY = ("none", "mmr")
NEAR_DUPLICATES = ("off", "report", "exclude")

_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Thresholds:
    """When an example counts as a near-duplicate of the query (defaults measured on COCO photos,
    see ``docs/selection.md``).

    ``image_hash``: largest Hamming distance (of 64 bits) between the dHashes of the query image and
    the example image. ``image_cosine``: smallest cosine of their embeddings (None: not used; the
    scale depends on the encoder, so there is no encoder-free default). ``caption``: smallest word-set
    Jaccard similarity between the example caption and one of the query's reference captions.
    """

    image_hash: int = 10
    image_cosine: float | None = None
    caption: float = 0.7

    def __post_init__(self) -> None:
        if not isinstance(self.image_hash, int) or isinstance(self.image_hash, bool) or not 0 <= self.image_hash <= 64:
            raise ConfigError(f"image hash threshold must be an integer in 0..64 (bits), got {self.image_hash!r}")
        if self.image_cosine is not None and not -1.0 <= float(self.image_cosine) <= 1.0:
            raise ConfigError(f"image cosine threshold must be in -1..1, got {self.image_cosine!r}")
        if not 0.0 < float(self.caption) <= 1.0:
            raise ConfigError(f"caption threshold must be in (0, 1], got {self.caption!r}")


@dataclass(frozen=True)
class Selection:
    """How a query's retrieved pairs become its k examples; ``Selection()`` is relevance only plus
    a near-duplicate *report* (nothing is dropped by default).

    ``diversity``: "none" or "mmr" (maximal marginal relevance between pairs: the same or a
    near-duplicate photo is fully redundant, otherwise caption overlap; a redundant pair loses up to
    ``1 - mmr_lambda`` of its own relevance, see :func:`mmr`). ``one_per_image``: no two
    examples show the same image (same did or same file content). With either, identical captions
    (after case/punctuation folding) count once. ``near_duplicates``: "off", "report" (flag examples
    whose image or caption copies the query's) or "exclude" (replace them by the next candidate;
    use it for evaluation). ``pairs_from``: M-BEIR query and/or qrels files whose judgements pair
    captions with their images before any retrieval completion. ``where``: field -> accepted
    values (AND over fields, OR within one), applied inside the search.
    """

    diversity: str = "none"
    #: measured (scripts/measure_pair_diversity.py, docs/selection.md): the largest lambda giving at
    #: least 4 distinct photos per 5 examples on both COCO sets (held-out photos with planted
    #: near-duplicates: 4.67, mean relevance -3.4 %; the 51-photo test sample) and on-topic products
    mmr_lambda: float = 0.7
    one_per_image: bool = False
    near_duplicates: str = "report"
    thresholds: Thresholds = field(default_factory=Thresholds)
    pairs_from: tuple[str, ...] = ()
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        if self.diversity not in DIVERSITY:
            raise ConfigError(f"unknown diversity {self.diversity!r}; expected one of: {', '.join(DIVERSITY)}")
        if self.near_duplicates not in NEAR_DUPLICATES:
            raise ConfigError(f"unknown near-duplicates mode {self.near_duplicates!r}; expected one of: "
                              f"{', '.join(NEAR_DUPLICATES)}")
        try:
            lam = float(self.mmr_lambda)
        except (TypeError, ValueError):
            raise ConfigError(f"mmr lambda must be a number in 0..1, got {self.mmr_lambda!r}") from None
        if not 0.0 <= lam <= 1.0:
            raise ConfigError(f"mmr lambda must be in 0..1, got {self.mmr_lambda!r}")
        object.__setattr__(self, "mmr_lambda", lam)
        object.__setattr__(self, "one_per_image", bool(self.one_per_image))
        if isinstance(self.thresholds, Mapping):
            object.__setattr__(self, "thresholds", Thresholds(**dict(self.thresholds)))
        pairs_from = (self.pairs_from,) if isinstance(self.pairs_from, str) else self.pairs_from
        object.__setattr__(self, "pairs_from", tuple(str(p) for p in pairs_from))
        object.__setattr__(self, "where", normalise_where(self.where))

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def of(cls, value: Selection | Mapping[str, Any] | None = None, **overrides: Any) -> Selection:
        """A Selection from None (defaults), a Selection or a dict (``to_dict`` form), with the
        non-None ``overrides`` (``diversity=``, ``where=``, ``image_hash=`` ...) applied."""
        if isinstance(value, Mapping):
            value = cls.from_dict(value)
        elif value is not None and not isinstance(value, Selection):
            raise ConfigError(f"selection must be a Selection or a dict, got {type(value).__name__}")
        base = value if value is not None else cls()
        given = {k: v for k, v in overrides.items() if v is not None}
        limits = {k: given.pop(k) for k in [f.name for f in fields(Thresholds)] if k in given}
        unknown = set(given) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown selection option(s): {', '.join(sorted(unknown))}")
        if limits:
            given["thresholds"] = replace(base.thresholds, **limits)
        return replace(base, **given) if given else base

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Selection:
        """The Selection :meth:`to_dict` described."""
        return cls.of(None, **data)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, as recorded in run manifests."""
        return {**asdict(self), "pairs_from": list(self.pairs_from), "where": {f: list(v) for f, v in self.where}}

    # -- what it asks of the retriever -------------------------------------------------------
    def pool_size(self, k: int) -> int:
        """How many acceptable pairs to gather before choosing k (MMR needs room to choose)."""
        return max(3 * k, k + 10) if self.diversity == "mmr" else k


def normalise_where(where: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``{"dataset": "mscoco"}``, ``{"dataset": ["9", "0"]}``, ``["dataset=mscoco,0"]`` or the
    normalised tuple -> sorted ``((field, (values...)), ...)``."""
    if not where:
        return ()
    if isinstance(where, str):
        where = [where]
    merged: dict[str, tuple[str, ...]] = {}
    for item in (where.items() if isinstance(where, Mapping) else where):
        if isinstance(item, str):
            name, sep, values = item.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"bad filter {item!r}: expected FIELD=VALUE (VALUE may be a,b for either)")
        else:
            name, values = item
        name = str(name).strip()
        if not _FIELD.match(name):
            raise ConfigError(f"bad filter field {name!r}: use a field name such as dataset, modality or a "
                              "src_content key")
        if isinstance(values, str):  # modalities split on '|': 'image,text' is the fused one, as in M-BEIR
            parts = values.split("|" if name == "modality" else ",")
        elif isinstance(values, Iterable):
            parts = [str(v) for v in values]
        else:
            parts = [str(values)]
        vals = tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))
        if name == "modality":
            try:
                vals = tuple(dict.fromkeys(Modality.parse(v).value for v in vals))
            except ValueError as e:
                raise ConfigError(f"filter modality=: {e}") from None
        if not vals:
            raise ConfigError(f"filter {name}= needs at least one value")
        if name in merged:  # the same field twice: both must hold -> the values both accept
            vals = tuple(v for v in merged[name] if v in vals)
            if not vals:
                raise ConfigError(f"filters on {name!r} exclude each other: no candidate can match")
        merged[name] = vals
    return tuple(sorted(merged.items()))


def selection_from_settings(given: Mapping[str, Any], base: Selection | Mapping[str, Any] | None = None
                            ) -> Selection:
    """The :class:`Selection` that example-selection settings by name (strings from ``--set`` are read
    by the name's type) make on top of ``base``; a bad value is one :class:`ConfigError` line."""
    keywords: dict[str, Any] = {}
    for name, value in given.items():
        keyword, read, _ = SELECTION_NAMES[name]
        keywords[keyword] = Setting(name, None, None, "", parse=read).coerce(value)  # read as the settings table reads
    return Selection.of(base, **keywords)


# -- applying a selection to one query ------------------------------------------------------------
@dataclass
class QueryEvidence:
    """What a query's examples must not copy: its image (hash, vector) and reference captions."""

    image_hash: int | None = None
    image_vector: Any = None  # the query's image embedding (pure image queries only)
    references: list[frozenset[str]] = field(default_factory=list)


@dataclass
class Offer:
    """A candidate pair the retriever proposes, in rank order."""

    cand_did: str
    pair: Any  # unirag.retrieval.results.Pair
    image_gid: int | None
    image_file: str | None


class PairPicker:
    """Chooses one query's k examples from pairs offered in rank order (see :class:`Selection`).

    Greedy rules apply in rank order (same image or caption already taken; near-duplicate under
    ``exclude``); MMR then re-ranks the gathered pool. ``vectors(gids)`` gives stored vectors.
    """

    def __init__(self, selection: Selection, k: int, evidence: QueryEvidence, vectors) -> None:
        self.sel, self.k, self.evidence, self.vectors = selection, k, evidence, vectors
        self.limit = selection.pool_size(k)
        self.taken: list[Offer] = []
        self._images: set[str] = set()
        self._captions: set[str] = set()
        self.flagged = 0
        self.excluded = 0

    def wants_more(self) -> bool:
        return len(self.taken) < self.limit

    def offer(self, o: Offer) -> bool:
        """Take the pair unless a rule rejects it; True if taken."""
        image_keys = self._image_keys(o) if self.sel.one_per_image else set()
        if image_keys & self._images:
            return False
        dedupes = self.sel.one_per_image or self.sel.diversity != "none"  # with either, a caption counts once
        cap = nd.caption_key(o.pair.txt) if dedupes else None
        if cap and cap in self._captions:
            return False
        reason = self._near_duplicate(o) if self.sel.near_duplicates != "off" else None
        if reason is not None:
            self.flagged += 1
            if self.sel.near_duplicates == "exclude":
                self.excluded += 1
                return False
            o.pair.near_duplicate = reason
        self._images |= image_keys
        if cap:
            self._captions.add(cap)
        self.taken.append(o)
        return True

    def _image_keys(self, o: Offer) -> set[str]:
        digest = nd.digest_of(o.image_file)
        return {f"did:{o.pair.image_did}"} | ({f"sha:{digest}"} if digest is not None else set())

    def _near_duplicate(self, o: Offer) -> str | None:
        ev, limits = self.evidence, self.sel.thresholds
        if ev.image_hash is not None and o.image_file is not None:
            h = nd.hash_of(o.image_file)
            if h is not None and (d := nd.hamming(h, ev.image_hash)) <= limits.image_hash:
                return f"image-hash:{d}"
        if limits.image_cosine is not None and ev.image_vector is not None and o.image_gid is not None:
            cos = float(self.vectors([o.image_gid])[0] @ ev.image_vector)
            if cos >= limits.image_cosine:
                return f"image-cosine:{cos:.3f}"
        if ev.references and o.pair.txt:
            words = nd.caption_words(o.pair.txt)
            best = max(nd.caption_similarity(words, r) for r in ev.references)
            if best >= limits.caption:
                return f"caption:{best:.2f}"
        return None

    def finish(self) -> list[Offer]:
        """The chosen offers, best first (at most k)."""
        if self.sel.diversity != "mmr" or len(self.taken) <= 1:
            return self.taken[: self.k]
        return mmr(self.taken, self.k, self.sel.mmr_lambda, self.redundancy())

    def redundancy(self):
        """How much each gathered pair repeats each other one, 0..1 (a symmetric matrix).

        1 when the two pairs show the same photo: the same image did, the same file content, or a
        near-duplicate photo (dHash within the ``image_hash`` threshold: a resized or re-encoded copy
        under another id); otherwise the word-set Jaccard similarity of their captions. Pairs, not
        single candidate vectors: two captions of one photo are one photo, however different their
        words, and two photos with near-identical captions say the same thing.
        """
        n = len(self.taken)
        keys = [self._image_keys(o) for o in self.taken]
        hashes = [nd.hash_of(o.image_file) for o in self.taken]
        words = [nd.caption_words(o.pair.txt) for o in self.taken]
        limit = self.sel.thresholds.image_hash
        out = np.zeros((n, n))
        for i in range(n):
            for j in range(i + 1, n):
                same = bool(keys[i] & keys[j]) or (hashes[i] is not None and hashes[j] is not None
                                                   and nd.hamming(hashes[i], hashes[j]) <= limit)
                out[i, j] = out[j, i] = 1.0 if same else nd.caption_similarity(words[i], words[j])
        return out

    def report(self) -> dict[str, int] | None:
        """``{"flagged": n, "excluded": m}`` for the run file (None when the guard is off)."""
        return None if self.sel.near_duplicates == "off" else {"flagged": self.flagged, "excluded": self.excluded}


def mmr(offers: list[Offer], k: int, lam: float, redundancy) -> list[Offer]:
    """Maximal marginal relevance (Carbonell & Goldstein 1998) over pairs, relevance-weighted:
    repeatedly take the pair maximising ``relevance - (1 - lam) * |relevance| * max redundancy to the
    pairs already taken`` (``redundancy``: :meth:`PairPicker.redundancy`, 0..1).

    Relevance-weighted: a redundant pair loses a share of its *own* relevance (at most ``1 - lam`` of
    it), not a fixed amount on the encoder's cosine scale, so a second caption of the best photo gives
    way to a slightly less relevant new photo but never to an off-topic one (a boy's shirt for a pink
    dress). The original form (``lam * rel - (1 - lam) * cosine of candidate vectors``) was measured
    and replaced: on product data it traded on-topic examples for unrelated ones, and on COCO with
    planted near-duplicates it gave 3.7 distinct photos per 5 examples (docs/selection.md)."""
    rel = np.array([float(o.pair.score or 0.0) for o in offers])
    chosen: list[int] = []
    left = list(range(len(offers)))
    while left and len(chosen) < k:
        repeat = redundancy[np.ix_(left, chosen)].max(axis=1, initial=0.0)  # 0 while none is chosen
        gain = rel[left] - (1.0 - lam) * np.abs(rel[left]) * repeat
        best = left[int(np.argmax(gain))]  # argmax keeps the earlier (better ranked) on ties
        chosen.append(best)
        left.remove(best)
    return [offers[i] for i in chosen]
