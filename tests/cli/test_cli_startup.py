"""`unirag --help` must answer without importing heavy libraries."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ["torch", "transformers", "faiss", "diffusers", "openai", "matplotlib", "sentence_transformers", "numpy",
         "fastapi", "uvicorn", "starlette", "ray", "pyarrow"]


def test_help_imports_no_heavy_library():
    code = (
        "import sys, json\n"
        "from unirag.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded == []
    assert "retrieve" in out.stdout and "cir" in out.stdout


def test_index_build_help_imports_no_heavy_library():
    """The index command documents Ray/Parquet options without importing Ray or pyarrow."""
    code = (
        "import sys, json\n"
        "import unirag\n"
        "from unirag.cli.main import main\n"
        "try:\n    main(['index', 'build', '--help'])\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert "--engine" in out.stdout and "--embeddings" in out.stdout and "--shard" in out.stdout


def test_every_registered_command_loads():
    """Each lazily registered command module exists and exposes a click command."""
    import click

    from unirag.cli.main import COMMANDS, cli

    ctx = click.Context(cli)
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        assert isinstance(cmd, click.Command), name
    from unirag.cli.evaluate_cmd import evaluate_group

    ectx = click.Context(evaluate_group)
    assert evaluate_group.list_commands(ectx) == ["captions", "images", "retrieval"]
    for name in evaluate_group.list_commands(ectx):
        assert isinstance(evaluate_group.get_command(ectx, name), click.Command), name


def test_user_error_is_one_line_exit_2(tmp_path, capsys):
    from cli_capture import main_result

    missing = tmp_path / "nope.jsonl"
    code, _, err = main_result(["index", "build", "--pool", str(missing), "--images-root", str(tmp_path),
                                "--out", str(tmp_path / "idx")], capsys)
    assert code == 2
    assert "Traceback" not in err
    assert str(missing) in err
