"""Errors a user can cause; each carries one line that says what is wrong."""


class SeForwarderError(Exception):
    """Base of the errors the CLI turns into one line and a non-zero exit."""

    exit_code = 1


class ConfigError(SeForwarderError):
    """A configuration key or value is wrong; the message names the key."""

    exit_code = 2


class StateError(SeForwarderError):
    """The state directory or its database cannot be used safely."""

    exit_code = 3
