"""CIR tests build their real-image sets with ``scripts/myntra_cir.py`` (a data script, not library code)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
