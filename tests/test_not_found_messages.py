"""Every reader of a file the user names ends a missing one (or a folder in its place) with the same
one-line "<what> not found" InputError naming the path (``unirag.errors.existing_path``)."""

from __future__ import annotations

import pytest

from unirag.cir.config import load_config
from unirag.cir.datasets import load_cirr, load_dataset
from unirag.errors import InputError
from unirag.generators.pricing import read_prices
from unirag.pipelines.experiment_grid import load_experiment


@pytest.mark.parametrize("read, what", [
    (read_prices, "prices file"),
    (load_experiment, "experiment file"),
    (load_config, "agents config"),
    (lambda path: load_dataset("cirr", path), "annotation file"),
    (lambda path: load_cirr(path, split_file=path), "file"),  # a CIRR JSON file read by _load_json
])
def test_a_missing_file_or_a_folder_is_named(tmp_path, read, what):
    for path in (tmp_path / "absent.json", tmp_path):
        with pytest.raises(InputError) as err:
            read(path)
        assert str(err.value) == f"{path}: {what} not found"
