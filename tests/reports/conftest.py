import sys
from pathlib import Path

# shared run-directory factory and the injected image feature extractor live with the metrics tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "metrics"))
