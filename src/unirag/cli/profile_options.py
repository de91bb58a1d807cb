"""``--profile`` and one option per behaviour setting, for any click command (one definition for all).

    @click.command("retrieve")
    @profile_options("pair_completion", "example_pairs")
    def retrieve(..., settings: Settings) -> None: ...

adds ``--profile default|official`` and ``--pair-completion pool|uniir``, ``--example-pairs ...``
(the choices, help and official value come from the setting's row in :mod:`unirag.profiles`), and
hands the command one resolved :class:`~unirag.profiles.Settings` as its ``settings`` argument
instead of the separate options. An option the user does not give is None, so the profile's value
applies; a given one overrides it and is recorded as an override in the run manifest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

PROFILE_HELP = ("Named set of behaviour settings: default (the papers plus unirag's fixes) or official "
                "(the official code's behaviour). Each setting option below overrides one of them.")


def _option_for(name: str) -> Callable:
    from unirag.profiles import SETTINGS, option_name

    s = SETTINGS[name]
    values = f"{s.default!s} (default profile) / {s.official!s} (official)"
    help_text = f"{s.help} [{values}]"
    if s.choices is not None and s.parse is None:
        return click.option(option_name(name), name, type=click.Choice([str(c) for c in s.choices]), default=None,
                            help=help_text)
    return click.option(option_name(name), name, type=str, default=None, metavar="VALUE", help=help_text)


def profile_options(*names: str, raw: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: ``--profile`` plus an option for each named setting; the command gets ``settings``
    (a resolved :class:`~unirag.profiles.Settings`), or with ``raw=True`` ``profile`` (None when not
    given) and ``setting_overrides`` (the settings given, unparsed) to apply on top of something else
    (``unirag run`` applies them to every cell of a grid)."""
    from unirag.profiles import PROFILES, SETTINGS

    names = names or tuple(SETTINGS)
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise RuntimeError(f"profile_options: unknown setting(s) {', '.join(unknown)}")

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from unirag.profiles import resolve

            profile = kwargs.pop("profile", None)
            given = {n: kwargs.pop(n, None) for n in names}
            if raw:
                resolve(profile or "default", **given)  # a bad value fails here, before any work
                kwargs["profile"] = profile
                kwargs["setting_overrides"] = {n: v for n, v in given.items() if v is not None}
            else:
                kwargs["settings"] = resolve(profile or "default", **given)
            return fn(*args, **kwargs)

        for name in reversed(names):
            wrapper = _option_for(name)(wrapper)
        return click.option("--profile", type=click.Choice(list(PROFILES)), default=None, help=PROFILE_HELP)(wrapper)

    return decorate
