"""The stages of a CIR run, defined once: their order, and their names in metrics and rankings files.

``baseline`` ranks by the fused embedding of reference image and modification text; ``coarse`` is
X^R's imagination + coarse filtering; ``fine`` adds question-based fine filtering (paper Alg. 1).
"""

from __future__ import annotations

from collections.abc import Iterable

from unirag.errors import ConfigError

#: Run order; every run computes the baseline, the X^R stages need agent models.
STAGES = ("baseline", "coarse", "fine")
#: Name of each stage in ``metrics.json`` and ``rankings.jsonl``.
STAGE_NAMES = {"baseline": "baseline", "coarse": "xr_coarse", "fine": "xr"}


def parse_stages(value: str | Iterable[str]) -> tuple[str, ...]:
    """``"baseline,fine"`` or a list of stage names -> those stages in run order; ConfigError otherwise."""
    parts = [p.strip() for p in (value.split(",") if isinstance(value, str) else value) if p and p.strip()]
    bad = [p for p in parts if p not in STAGES]
    if bad or not parts:
        raise ConfigError(f"stages must be a comma-separated subset of {','.join(STAGES)}, got {value!r}")
    return tuple(s for s in STAGES if s in parts)
