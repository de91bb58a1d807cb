"""``unirag`` entry point: a click group whose subcommands are imported lazily.

Only the name -> "module:attribute" table below is read for ``unirag --help``; torch, faiss and
transformers are imported by a command's module when that command actually runs.
"""

from __future__ import annotations

import pkgutil
import sys

import click

from unirag import __version__

# name -> (module:attribute, one-line help shown by --help without importing the module)
COMMANDS: dict[str, tuple[str, str]] = {
    "import": ("unirag.cli.import_cmd:import_group", "Import COCO captions or a JSONL/CSV list into M-BEIR format."),
    "index": ("unirag.cli.index_cmd:index_group", "Build or inspect a FAISS index of a candidate pool."),
    "retrieve": ("unirag.cli.retrieve_cmd:retrieve", "Retrieve top-k candidates and image-caption pairs."),
    "evaluate": ("unirag.cli.evaluate_cmd:evaluate_group", "Score retrieval runs, captions or generated images."),
    "caption": ("unirag.cli.caption_cmd:caption", "Caption images zero-shot, with random or retrieved examples."),
    "generate-images": ("unirag.cli.generate_images_cmd:generate_images", "Generate images from captions with examples."),
    "run": ("unirag.cli.run_cmd:run", "Run an experiment grid from a YAML file."),
    "report": ("unirag.cli.report_cmd:report", "Paper-style tables, plots and an HTML gallery from runs."),
    "cir": ("unirag.cli.cir_cmd:cir", "Composed image retrieval with X^R agents (FashionIQ, CIRR, CIRCO)."),
    "serve": ("unirag.cli.serve_cmd:serve", "REST API and web page for search, RAG captioning and CIR."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when one runs: :data:`COMMANDS` maps each name to
    ("module:attribute", the one-line help ``--help`` shows without importing the module)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return pkgutil.resolve_name(COMMANDS[name][0]) if name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, help_) for name, (_, help_) in COMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="unirag")
def cli() -> None:
    """unirag: multimodal retrieval and retrieval-augmented generation (UniRAG, X^R).

    Stages, each one command over M-BEIR-format files:
    import -> index build -> retrieve -> caption / generate-images -> evaluate -> report.
    """


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; unirag's own errors are printed as one line (no traceback, secrets masked), exit code 2
    (1 for :class:`~unirag.errors.RunFailedError`: a run in which every item failed)."""
    import warnings

    from unirag.errors import UniragError

    # a warning is one line for the user (what happened and what to do), not a source location;
    # restored afterwards, for callers that run the CLI in their own process (tests, notebooks)
    formatwarning = warnings.formatwarning
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"warning: {message}\n"
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except UniragError as e:
        from unirag.redact import redact

        click.echo(f"error: {redact(str(e))}", err=True)
        sys.exit(getattr(e, "exit_code", 2))
    except (OSError, RuntimeError) as e:  # RuntimeError: FAISS and sqlite wrap the OSError they hit
        from unirag.errors import os_error_line

        line = os_error_line(e)
        if line is None:
            raise  # not the file system: a bug, shown with its traceback
        click.echo(f"error: {line}; finished work is kept, free space or fix the folder "
                   "and rerun", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("Interrupted; finished work is saved, rerun the same command to resume.", err=True)
        sys.exit(130)
    finally:
        warnings.formatwarning = formatwarning


if __name__ == "__main__":
    main()
