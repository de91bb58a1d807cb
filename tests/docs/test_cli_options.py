"""Each command page documents exactly the options of its commands, and no page shows an option that
does not exist: read from click's command objects (src/unirag/cli/), so the check is instant."""

from __future__ import annotations

import click
import pytest
from docs_markdown import DOCS, command_lines, option_tables, page_id, pages

from unirag.cli.main import COMMANDS, cli
from unirag.index.factory import DEFAULT_PARAMS

# command family (the first word after `unirag`) -> its page
FAMILY_PAGES = {
    "import": "commands/import.md",
    "index": "commands/index-build.md",
    "retrieve": "commands/retrieve.md",
    "evaluate": "commands/evaluate.md",
    "caption": "commands/caption.md",
    "generate-images": "commands/generate-images.md",
    "run": "commands/run.md",
    "report": "commands/report.md",
    "cir": "commands/cir.md",
    "serve": "commands/serve.md",
}


def _leaves(cmd: click.Command, path: list[str]):
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _leaves(cmd.get_command(ctx, name), [*path, name])
    else:
        yield " ".join(path), cmd


def leaf_commands() -> dict[str, click.Command]:
    ctx = click.Context(cli)
    return {name: cmd for family in COMMANDS for name, cmd in _leaves(cli.get_command(ctx, family), [family])}


def help_names(cmd: click.Command) -> list[str]:
    """What ``--help`` lists: every option spelling (but --help itself) and the arguments."""
    names = []
    for p in cmd.params:
        if isinstance(p, click.Argument):
            names.append(p.name.upper() + ("..." if p.nargs == -1 else ""))
        else:
            names += [o for o in p.opts + p.secondary_opts if o.startswith("--")]
    return names


def _row(cmd: click.Command, name: str) -> str:
    """A table row for an undocumented option, from its --help text (to edit, not to paste blindly)."""
    param = next(p for p in cmd.params if name in (*p.opts, *p.secondary_opts) or p.name.upper() in name)
    unset = param.default is None or param.default is False or param.default == () or "Sentinel" in repr(param.default)
    default = "required" if param.required else "" if unset else f"`{param.default}`"
    return f"| `{name}` | {default} | {getattr(param, 'help', None) or ''} |"


def resolve(tokens: list[str]) -> tuple[str, click.Command, list[str]] | None:
    """The leaf command a documented command line runs, and the tokens after its name."""
    cmd: click.Command = cli
    path: list[str] = []
    while isinstance(cmd, click.Group):
        if not tokens or tokens[0] in ("...", "…", "--help", "-h") or tokens[0].isupper():
            return None  # `unirag COMMAND --help`, `unirag index ...`: no options to check
        ctx = click.Context(cmd)
        sub = cmd.get_command(ctx, tokens[0])
        if sub is None and path == ["report"]:  # `unirag report RUN... --out R` is `report build`
            sub, tokens = cmd.get_command(ctx, "build"), ["build", *tokens]
        assert sub is not None, f"no command `unirag {' '.join([*path, tokens[0]])}`"
        path.append(tokens[0])
        cmd, tokens = sub, tokens[1:]
    return " ".join(path), cmd, tokens


def test_the_families_are_the_cli_commands():
    assert set(FAMILY_PAGES) == set(COMMANDS)
    assert all((DOCS / page).is_file() for page in FAMILY_PAGES.values())


@pytest.mark.parametrize("family", sorted(FAMILY_PAGES))
def test_command_page_lists_exactly_the_help_options(family):
    page = DOCS / FAMILY_PAGES[family]
    tables = option_tables(page.read_text(encoding="utf-8"))
    commands = {name: cmd for name, cmd in leaf_commands().items() if name.split()[0] == family}
    assert sorted(tables) == sorted(commands), f"{page.name}: one options table per `unirag {family} ...` command"
    for name, cmd in commands.items():
        documented, in_help = tables[name], help_names(cmd)
        missing = sorted(set(in_help) - set(documented))
        assert missing == [], (f"`unirag {name}` options missing from {page.name}; rows to start from:\n"
                               + "\n".join(_row(cmd, option) for option in missing))
        assert sorted(set(documented) - set(in_help)) == [], f"{page.name} documents options `unirag {name}` lacks"
        assert len(documented) == len(set(documented)), f"{page.name}: an option of `unirag {name}` listed twice"


@pytest.mark.parametrize("page", pages(), ids=page_id)
def test_every_documented_command_line_uses_existing_options(page):
    for tokens in command_lines(page.read_text(encoding="utf-8")):
        resolved = resolve(tokens)
        if resolved is None:
            continue
        name, cmd, rest = resolved
        known = set(help_names(cmd)) | {"--help"}
        for i, token in enumerate(rest):
            if token.startswith("--"):
                option = token.split("=", 1)[0]
                assert option in known, f"{page_id(page)}: `unirag {name}` has no option {option}"
            if token == "--param" and i + 1 < len(rest) and "=" in rest[i + 1]:
                index_type = rest[rest.index("--index-type") + 1] if "--index-type" in rest else None
                key = rest[i + 1].split("=", 1)[0]
                allowed = DEFAULT_PARAMS[index_type] if index_type in DEFAULT_PARAMS else \
                    {k for params in DEFAULT_PARAMS.values() for k in params}
                assert key in allowed, f"{page_id(page)}: --param {key} is not a parameter of {index_type or 'any'} index"


def test_the_checks_see_commands_options_and_tables():
    """The readers find what the pages hold (a reader that found nothing would pass every check)."""
    lines = [t for p in pages() for t in command_lines(p.read_text(encoding="utf-8"))]
    resolved = [r for r in map(resolve, lines) if r is not None]
    assert len(resolved) > 60
    assert {name for name, _, _ in resolved} >= set(leaf_commands()) - {"report sampling compare"} - {"index verify"}
    assert sum(len(t) for t in option_tables((DOCS / "commands/caption.md").read_text(encoding="utf-8")).values()) > 20
    # a made-up option on a page is caught
    fake = "```bash\nunirag retrieve --index I --queries Q --out O --no-such-option\n```\n"
    (tokens,) = command_lines(fake)
    _, cmd, rest = resolve(tokens)
    assert "--no-such-option" in rest and "--no-such-option" not in help_names(cmd)
