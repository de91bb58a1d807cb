"""numpy's BLAS runs on one thread beside a torch model (``unirag.runtime.configure_torch_threads``).

OpenBLAS's idle threads spin after each call on the cores torch's threads need for the next forward
pass; with two of them on 2 cores the offline encoder's text batches cost twice the CPU
(docs/benchmarks.md). Each case runs in a fresh interpreter: the limit is process-wide and set once.
"""

import json
import os
import subprocess
import sys

PROBE = """
import json
from threadpoolctl import threadpool_info
import numpy
before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
from unirag.runtime import configure_torch_threads
configure_torch_threads()
after = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(json.dumps({"before": before, "after": after}))
"""


def _probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_loading_a_model_leaves_numpy_one_blas_thread():
    seen = _probe(UNIRAG_TORCH_THREADS="2")
    assert seen["after"] and all(n == 1 for n in seen["after"]), seen


def test_openblas_num_threads_set_by_the_user_is_kept():
    seen = _probe(UNIRAG_TORCH_THREADS="2", OPENBLAS_NUM_THREADS="2")
    assert seen["before"] == seen["after"] == [2] * len(seen["after"]) and seen["after"], seen
