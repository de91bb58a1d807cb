"""Keep secrets out of responses and logs: the masking lives in :mod:`unirag.redact` (shared with run
files and manifests); re-exported here for the service's modules."""

from unirag.redact import (  # noqa: F401
    MASK,
    RedactingFilter,
    install_log_redaction,
    redact,
    redact_json,
    redact_record,
    secret_values,
)
