"""SPICE through the ``spice-1.0.jar`` that pycocoevalcap ships, without its download step.

pycocoevalcap's ``Spice()`` downloads Stanford CoreNLP 3.6.0 (two jars) on first use, which fails
offline. The jars are looked for first (``spice_lib``, then ``$UNIRAG_SPICE_LIB``, then pycocoevalcap's
``spice/lib``); without them SPICE is skipped with one line saying how to enable it. The jar runs with
pycocoevalcap's arguments, minus its LMDB cache (it needs Java 8 internals and only speeds up rescoring).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

SPICE_LIB_ENV = "UNIRAG_SPICE_LIB"
CORENLP_JARS = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")
CORENLP_ZIP = "https://nlp.stanford.edu/software/stanford-corenlp-full-2015-12-09.zip"


def pycocoevalcap_spice_dir() -> Path:
    spec = importlib.util.find_spec("pycocoevalcap")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("pycocoevalcap is not installed: pip install 'unirag[eval]'")
    return Path(list(spec.submodule_search_locations)[0]) / "spice"


def find_corenlp(spice_lib: str | Path | None = None) -> Path | None:
    """The first directory (see module doc) that holds both CoreNLP 3.6.0 jars, else None."""
    for d in [*(Path(p) for p in (spice_lib, os.environ.get(SPICE_LIB_ENV)) if p), pycocoevalcap_spice_dir() / "lib"]:
        if all((d / jar).is_file() for jar in CORENLP_JARS):
            return d
    return None


def spice_unavailable_message(spice_lib: str | Path | None = None) -> str:
    where = f" (looked in {spice_lib})" if spice_lib else ""
    return (f"SPICE skipped: Stanford CoreNLP 3.6.0 jars not found{where}; to enable it put "
            f"{' and '.join(CORENLP_JARS)} (from {CORENLP_ZIP}) in a directory and pass --spice-lib DIR "
            f"or set {SPICE_LIB_ENV}=DIR")


def _float(v: object) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def run_spice(gts: Mapping[str, Sequence[str]], res: Mapping[str, Sequence[str]], corenlp_dir: Path,
              java: str = "java") -> tuple[float, list[float]]:
    """(mean SPICE F-score, per-item F-scores in ``gts`` order) of PTB-tokenized captions, as
    pycocoevalcap's ``Spice.compute_score`` (mean of ``All.f``)."""
    ids = list(gts)
    data = [{"image_id": i, "test": res[i][0], "refs": list(gts[i])} for i in ids]
    spice_dir = pycocoevalcap_spice_dir()
    classpath = os.pathsep.join([str(spice_dir / "spice-1.0.jar"), str(spice_dir / "lib" / "*"),
                                 str(Path(corenlp_dir).resolve() / "*")])  # CoreNLP from ``corenlp_dir``
    with tempfile.TemporaryDirectory(prefix="unirag-spice-") as tmp:
        in_file, out_file = Path(tmp) / "input.json", Path(tmp) / "output.json"
        in_file.write_text(json.dumps(data), encoding="utf-8")
        proc = subprocess.run([java, "-Xmx8G", "-cp", classpath, "edu.anu.spice.SpiceScorer", str(in_file),
                               "-out", str(out_file), "-subset", "-silent"], cwd=spice_dir, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise RuntimeError(f"SPICE failed (exit {proc.returncode}): {' | '.join(tail)}")
        results = json.loads(out_file.read_text(encoding="utf-8"))
    by_id = {str(item["image_id"]): _float(item["scores"]["All"]["f"]) for item in results}
    per_item = [by_id.get(str(i), math.nan) for i in ids]
    mean = sum(per_item) / len(per_item) if per_item else math.nan
    return mean, per_item
