"""Facts the docs state about the code, checked against the code: an error message quoted in
docs/inputs.md, a default in docs/commands/cir.md, and the offline encoder's vector size in
docs/encoders.md (a new user found each of them wrong once)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from unirag.cli.main import main

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_duplicate_did_message_in_inputs_md_is_the_real_one(tmp_path, capsys) -> None:
    pool = tmp_path / "pool.jsonl"
    pool.write_text('{"did": "a", "modality": "text", "txt": "x"}\n{"did": "b", "modality": "text", "txt": "y"}\n'
                    '{"did": "a", "modality": "text", "txt": "z"}\n')
    with pytest.raises(SystemExit):
        main(["index", "build", "--pool", str(pool), "--out", str(tmp_path / "idx")])
    err = capsys.readouterr().err.strip().replace(str(tmp_path) + "/", "")
    quoted = re.search(r"`(error: pool\.jsonl:3[^`]*)`", (DOCS / "inputs.md").read_text()).group(1)
    assert quoted in err and quoted + " " not in err  # the whole message, nothing after it


def test_cir_md_gives_the_reference_default_the_code_has(cir_data: Path) -> None:
    from unirag.cir.datasets import load_dataset

    row = next(line for line in (DOCS / "commands" / "cir.md").read_text().splitlines()
               if line.startswith("| `--exclude-reference`"))
    default = row.split("|")[2]
    cirr = load_dataset("cirr", cir_data / "cirr" / "captions" / "cap.rc2.val.json")
    fiq = load_dataset("fashioniq", cir_data / "fashioniq" / "captions" / "cap.dress.val.json")
    assert cirr.exclude_reference and not fiq.exclude_reference  # what the default does
    assert "--keep-reference" not in default and "excluded for CIRR" in default and "kept otherwise" in default


def test_encoders_md_states_the_offline_vector_size() -> None:
    from unirag.encoders.offline import asset_metadata

    dim = asset_metadata()["dim"]
    text = (DOCS / "encoders.md").read_text()
    assert f"**{dim:,} dimensions**" in text
    assert f"{dim * 4 / 1000:.1f} kB per candidate" in text
