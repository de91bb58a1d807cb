"""Run a ``unirag`` command in-process and fail with its output when it does not succeed."""

from __future__ import annotations

from click.testing import CliRunner


def run_cli(*args: object) -> str:
    from unirag.cli.main import cli

    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output
