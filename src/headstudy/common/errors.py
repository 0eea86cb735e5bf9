"""The one kind of error meant for the user."""

from __future__ import annotations


class ConfigError(Exception):
    """Bad input: the message names the key or file and what was expected."""


def first_line(error: Exception) -> str:
    """An exception's message in one line, for a one-line error."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
