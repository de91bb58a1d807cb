"""``--profile NAME`` and a repeatable ``--set NAME=VALUE``: how every command takes behaviour settings.

    @click.command("retrieve")
    @behaviour_options()
    def retrieve(..., settings: Settings, selection: Selection) -> None: ...

One option for every setting of the settings table (:mod:`unirag.profiles`), instead of one flag
per setting: ``--set xr_scoring=official --set temperature=none``. The names are the table's, the
same a grid's ``settings:`` and the Python API take; values are read by the setting's declared type
(:meth:`~unirag.profiles.Setting.coerce`). Commands that choose few-shot examples also take the
example-selection names (``--set diversity=mmr --set filter=dataset=mscoco``, see
:data:`unirag.profiles.SELECTION_NAMES`). An unknown name or a bad value fails before
any work, as one line naming the known names or choices (exit 2). A given setting is recorded as an
override in the run manifest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

PROFILE_HELP = ("Named set of behaviour settings: default (the papers plus unirag's fixes) or official "
                "(the official code's behaviour); --set overrides single settings.")


def behaviour_options(selection: bool = True, raw: bool = False,
                      profile_help: str = PROFILE_HELP) -> Callable[[Callable], Callable]:
    """Decorator: ``--profile`` and ``--set``. The command gets ``settings`` (a resolved
    :class:`~unirag.profiles.Settings`), or with ``raw=True`` ``profile`` (None when not given) and
    ``setting_overrides`` (the settings given, unparsed but checked) to apply on top of something else
    (``unirag run``: every cell of a grid; ``unirag cir``: the agents YAML's profile). With
    ``selection`` it also gets ``selection`` (a :class:`~unirag.retrieval.selection.Selection`)."""
    from unirag.profiles import PROFILES, known_names

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from unirag.profiles import read_assignments, resolve, split_settings

            profile = kwargs.pop("profile", None)
            overrides, chosen = split_settings(read_assignments(kwargs.pop("set_items", ())), selection=selection)
            settings = resolve(profile or "default", **overrides)  # a bad value fails here, before any work
            if raw:
                kwargs["profile"], kwargs["setting_overrides"] = profile, overrides
            else:
                kwargs["settings"] = settings
            if selection:
                from unirag.retrieval.selection import selection_from_settings

                kwargs["selection"] = selection_from_settings(chosen)
            return fn(*args, **kwargs)

        wrapper = click.option("--set", "set_items", multiple=True, metavar="NAME=VALUE",
                               help="A behaviour setting over the profile, NAME=VALUE (repeatable), e.g. --set "
                                    f"xr_scoring=official; see docs/settings.md. Names: {known_names(selection)}.")(wrapper)
        return click.option("--profile", type=click.Choice(list(PROFILES)), default=None, help=profile_help)(wrapper)

    return decorate
