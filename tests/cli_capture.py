"""Run ``unirag.cli.main.main`` in-process and keep what it printed, for tests that check exit codes."""

from __future__ import annotations


def main_result(args: list[str], capsys) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``unirag ARGS``: 0 when it returned or exited without a code."""
    from unirag.cli.main import main

    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err
