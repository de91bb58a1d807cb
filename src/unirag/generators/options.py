"""Generator option names, defined once for the CLI, the runs, the experiment grids and X^R.

Backends take the options their constructors declare (see :mod:`unirag.generators.spec`); these
sets say which options a run passes through, and which of them only say *where or how fast* a model
runs. Those are left out of run identities and agent-call cache keys, so moving a server to another
port or a model to another GPU resumes a run instead of starting it again.
"""

from __future__ import annotations

#: Options a caption or image run passes to the generator it loads (``--base-url``, ``--device``, ...).
GENERATOR_OPTIONS = frozenset({"base_url", "timeout", "device", "dtype", "batch_size", "family", "similarity",
                               "quality", "trust_remote_code"})
#: Options that do not change what a model answers: not part of a run's identity or a cache key.
EXECUTION_OPTIONS = frozenset({"base_url", "timeout", "api_key_env", "device", "batch_size"})


def identity_config(config: dict) -> dict:
    """A generator's recorded config without the execution options (what a resume must match)."""
    return {k: v for k, v in config.items() if k not in EXECUTION_OPTIONS}
