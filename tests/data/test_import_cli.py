"""`unirag import ...` through the real entry point (errors -> one line, exit code 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from unirag.cli.main import main


def test_import_coco_cli(coco_mini: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    main(
        [
            "import",
            "coco",
            "--captions",
            str(coco_mini / "captions.jsonl"),
            "--images",
            str(coco_mini),
            "--out",
            str(tmp_path),
            "--limit",
            "20",
            "--seed",
            "3",
            "--all-captions",
            "--check",
            "verify",
        ]
    )
    out = capsys.readouterr().out
    assert "pool: 20 images + 100 captions" in out and "100 text->image (task 0, all captions)" in out
    summary = json.loads((tmp_path / "import_summary.json").read_text())
    assert summary["queries"] == {"task3_image2text": 20, "task0_text2image": 100}
    assert summary["image_check"] == "verify"


def test_import_jsonl_and_csv_cli(coco_mini: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows = [json.loads(x) for x in (coco_mini / "captions.jsonl").read_text().splitlines()[:3]]
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"path": r["image"], "caption": r["captions"][0]}) + "\n" for r in rows)
    )
    main(
        [
            "import",
            "jsonl",
            "--input",
            str(tmp_path / "in.jsonl"),
            "--images",
            str(coco_mini),
            "--out",
            str(tmp_path / "a"),
            "--image-field",
            "path",
            "--name",
            "mine",
        ]
    )
    assert "pool: 3 images + 3 captions" in capsys.readouterr().out
    assert (tmp_path / "a" / "qrels_task0.txt").read_text().splitlines()[0] == "mine:q0:0.0 0 mine:img:0 1 0"
    (tmp_path / "in.txt").write_text(
        "img;caps\n" + "".join(f"{r['image']};{'#'.join(r['captions'])}\n" for r in rows)
    )
    main(
        [
            "import",
            "csv",
            "--input",
            str(tmp_path / "in.txt"),
            "--images",
            str(coco_mini),
            "--out",
            str(tmp_path / "b"),
            "--image-field",
            "img",
            "--caption-field",
            "caps",
            "--caption-sep",
            "#",
            "--delimiter",
            ";",
        ]
    )
    assert "pool: 3 images + 15 captions" in capsys.readouterr().out


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "in.jsonl").write_text('{"image": "a.jpg", "caption": "x"}\n{"image": "b.jpg"}\n')
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "import",
                "jsonl",
                "--input",
                str(tmp_path / "in.jsonl"),
                "--images",
                str(tmp_path),
                "--out",
                str(tmp_path / "o"),
            ]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {tmp_path / 'in.jsonl'}:2, field 'caption': missing field"


def test_import_help_is_light() -> None:
    """The import command's help must not pull heavy libraries (it is part of `unirag --help` paths)."""
    code = (
        "import sys; from unirag.cli.main import main\n"
        "try: main(['import', 'coco', '--help'])\nexcept SystemExit: pass\n"
        "print(sorted(m for m in ('torch', 'faiss', 'transformers', 'PIL', 'tqdm') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Usage:" in out and "--captions" in out  # the help really was rendered, not an early exit
    assert out.strip().splitlines()[-1] == "[]"
