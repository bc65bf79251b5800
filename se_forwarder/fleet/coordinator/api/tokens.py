"""The control API's token table: who may act, by name. Read from ``[api] token_file``.

The server records the actor of every action (pause, hold, approve ...) as the name of the token
that authorised it, never as what the client says of itself. The file, one entry a line, ``#``
starting a comment::

    alice  3q2+7wJ8...        # a name, then its token: actions are recorded as "alice"
    ops-bot  h1Kx0...
    Yz9m1c...                 # a token alone: its name is token-<8 hex of its SHA-256>

Names are 1-64 letters, digits and ``. _ - @ :``, unique in the file; tokens at least
``MIN_TOKEN`` characters without spaces, unique too. A file of one token per line (the format
before names) still works: each token gets the name ``token-<8 hex>``, the same for the same token
wherever it is in the file, and nothing about the token can be learnt from it. To rotate a
person's token, add the new one under a name of its own (``alice-2``), switch, then remove the
old line.

The commands (client.py) send the token of the file's first entry: give each person a file of
their own (``--token-file``) holding their entry, and the server's file every entry.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....errors import ConfigError

MIN_TOKEN = 16
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}\Z")


def unnamed(token: str) -> str:
    """The name of a token given without one: ``token-`` and 8 hex of its SHA-256."""
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class TokenTable:
    entries: tuple[tuple[str, str], ...]  # (name, token), in the file's order

    @classmethod
    def of(cls, tokens: TokenTable | list[str] | tuple[str, ...]) -> TokenTable:
        """A table as given, or one of bare tokens (each named as ``unnamed`` says)."""
        if isinstance(tokens, TokenTable):
            return tokens
        return cls(tuple((unnamed(t), t) for t in tokens))

    def name_of(self, given: str) -> str | None:
        """The name of the token ``given`` (compared in constant time with every entry), or None."""
        found = None
        for name, token in self.entries:
            if hmac.compare_digest(token.encode(), given.encode()):
                found = name
        return found

    @property
    def first(self) -> str:
        return self.entries[0][1]

    def __len__(self) -> int:
        return len(self.entries)


def bearer(request: Any, table: TokenTable) -> str | None:
    """The name of an HTTP request's bearer token in ``table``, or None."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return None
    return table.name_of(given.strip())


def read_tokens(path: str, where: str = "api.token_file") -> TokenTable:
    """The table in ``path`` (module docstring); ConfigError naming ``where`` and the problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"{where}: {path} cannot be read ({why})") from None
    entries: list[tuple[str, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) > 2:
            raise ConfigError(f"{where}: {path} line {number}: give a name and a token, or a token alone")
        name, token = (fields[0], fields[1]) if len(fields) == 2 else (unnamed(fields[0]), fields[0])
        if len(token) < MIN_TOKEN:
            raise ConfigError(f"{where}: {path} line {number}: a token must be at least {MIN_TOKEN} "
                              "characters without spaces (e.g. head -c 32 /dev/urandom | base64)")
        if not NAME.match(name):
            raise ConfigError(f"{where}: {path} line {number}: a name is 1-64 letters, digits and "
                              "'.', '_', '-', '@', ':'")
        if any(name == n for n, _ in entries) or any(token == t for _, t in entries):
            raise ConfigError(f"{where}: {path} line {number}: the same name or token is in the file twice")
        entries.append((name, token))
    if not entries:
        raise ConfigError(f"{where}: {path} holds no token")
    return TokenTable(tuple(entries))
