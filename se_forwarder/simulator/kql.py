"""The subset of the Kusto query language the simulated Resource Graph answers.

Resource Graph runs KQL; the simulator understands only the shapes a coordinator needs, and
refuses anything else with one line naming it (``KqlError``, which ARM answers with 400)::

    <table>
    | where <expr> <op> <literal> [and|or <expr> <op> <literal> ...]   (and binds tighter)
    | project <expr>, <name> = <expr>, ...
    | extend <name> = <expr>, ...
    | order by <expr> [asc|desc], ...          (also: sort by)
    | limit <n>                                (also: take)

- ``<table>``: ``resources``, ``maintenanceresources``, ``computeresources``, ``healthresources``,
  ``alertsmanagementresources`` (any case);
- ``<expr>``: a column or a dotted path into it (``properties.EventStatus``,
  ``properties['availabilitySet'].id``), optionally in ``tostring()``, ``tolower()`` or
  ``toupper()``;
- ``<op>``: ``==``, ``!=``, ``=~``, ``!~`` (case-insensitive), ``in``, ``!in``, ``in~``, ``!in~``
  (a parenthesised list), ``contains``, ``startswith`` (case-insensitive, as in KQL);
- ``<literal>``: a string in single or double quotes, a number, ``true``/``false``.

``parse(text)`` checks a query; ``run(query, rows)`` evaluates it on a table's rows (dicts).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

TABLES = ("resources", "maintenanceresources", "computeresources", "healthresources",
          "alertsmanagementresources")
_FUNCS = {
    "tostring": lambda v: "" if v is None else v if isinstance(v, str) else _text(v),
    "tolower": lambda v: _text(v).lower(),
    "toupper": lambda v: _text(v).upper(),
}
_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<num>-?\d+(?:\.\d+)?)"""
    r"""|(?P<op>!in~|in~|!in|==|!=|=~|!~|[(),=\[\].])|(?P<word>[A-Za-z_][A-Za-z0-9_]*))"""
)


class KqlError(ValueError):
    """A query outside the subset (module docstring); the message names the part."""


Expr = Callable[[dict[str, Any]], Any]


@dataclass
class Query:
    table: str
    stages: list[tuple[str, Any]] = field(default_factory=list)


def _text(value: Any) -> str:
    import json

    return value if isinstance(value, str) else "" if value is None else json.dumps(value)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise KqlError(f"cannot read the query at {text[pos : pos + 20].strip()!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def _split_pipes(text: str) -> list[str]:
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


class _Reader:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens, self.i = tokens, 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if not token[0]:
            raise KqlError("the query ends too early")
        self.i += 1
        return token

    def word(self, *words: str) -> bool:
        kind, value = self.peek()
        if kind == "word" and value.lower() in words:
            self.i += 1
            return True
        return False

    def symbol(self, value: str) -> bool:
        if self.peek() == ("op", value):
            self.i += 1
            return True
        return False

    def done(self) -> bool:
        return self.i >= len(self.tokens)

    def expr(self) -> Expr:
        kind, name = self.take()
        if kind != "word":
            raise KqlError(f"expected a column, got {name!r}")
        if name.lower() in _FUNCS and self.symbol("("):
            inner, func = self.expr(), _FUNCS[name.lower()]
            if not self.symbol(")"):
                raise KqlError(f"{name}( needs a closing parenthesis")
            return lambda row: func(inner(row))
        path = [name]
        while True:
            if self.symbol("."):
                kind, part = self.take()
                if kind != "word":
                    raise KqlError(f"expected a name after '.', got {part!r}")
                path.append(part)
            elif self.symbol("["):
                kind, part = self.take()
                if kind != "str" or not self.symbol("]"):
                    raise KqlError("use ['name'] to index a column")
                path.append(_unquote(part))
            else:
                return lambda row: _get(row, path)

    def literal(self) -> Any:
        kind, value = self.take()
        if kind == "str":
            return _unquote(value)
        if kind == "num":
            return float(value) if "." in value else int(value)
        if kind == "word" and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise KqlError(f"expected a value, got {value!r}")

    def values(self) -> list[Any]:
        if not self.symbol("("):
            raise KqlError("in needs a parenthesised list, e.g. in ('a', 'b')")
        items = [self.literal()]
        while self.symbol(","):
            items.append(self.literal())
        if not self.symbol(")"):
            raise KqlError("the list after in needs a closing parenthesis")
        return items


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def _get(row: Any, path: Sequence[str]) -> Any:
    for i, part in enumerate(path):
        if not isinstance(row, dict):
            return None
        if part in row:
            row = row[part]
        else:  # column names are case-insensitive for the top level
            row = next((v for k, v in row.items() if i == 0 and k.lower() == part.lower()), None)
    return row


def _sort_key(expr: Expr) -> Callable[[dict[str, Any]], tuple[int, float, str]]:
    return lambda row: _order_key(expr(row))


def _order_key(value: Any) -> tuple[int, float, str]:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (1, float(value), "")
    return (0 if value is None else 2, 0.0, _text(value).lower())


def _same(a: Any, b: Any, fold: bool) -> bool:
    if isinstance(a, str) and isinstance(b, str) and fold:
        return a.lower() == b.lower()
    return bool(a == b)


def _condition(reader: _Reader) -> Callable[[dict[str, Any]], bool]:
    left = reader.expr()
    kind, op = reader.take()
    op = op.lower()
    if op in ("==", "!=", "=~", "!~"):
        right, fold, negate = reader.literal(), op in ("=~", "!~"), op.startswith("!")
        return lambda row: _same(left(row), right, fold) != negate
    if op in ("in", "!in", "in~", "!in~"):
        items, fold, negate = reader.values(), op.endswith("~"), op.startswith("!")
        return lambda row: any(_same(left(row), v, fold) for v in items) != negate
    if op in ("contains", "startswith"):
        right = str(reader.literal()).lower()
        check = (lambda t: right in t) if op == "contains" else (lambda t: t.startswith(right))
        return lambda row: check(_text(left(row)).lower())
    raise KqlError(
        f"operator {op!r} is not in the simulator's subset (==, !=, =~, !~, in, in~, "
        "!in, !in~, contains, startswith)"
    )


def _named(reader: _Reader) -> list[tuple[str, Expr]]:
    out: list[tuple[str, Expr]] = []
    while True:
        start = reader.i
        kind, name = reader.take()
        if kind == "word" and reader.symbol("="):
            out.append((name, reader.expr()))
        else:
            reader.i = start
            expr = reader.expr()
            parts = [
                v if k == "word" else _unquote(v)
                for k, v in reader.tokens[start : reader.i]
                if (k == "word" and v.lower() not in _FUNCS) or k == "str"
            ]
            out.append(("_".join(parts), expr))
        if not reader.symbol(","):
            return out


def _stage(text: str) -> tuple[str, Any]:
    reader = _Reader(_tokens(text))
    if reader.word("where"):
        groups = [[_condition(reader)]]  # or-ed groups of and-ed conditions
        while (joined := "and" if reader.word("and") else "or" if reader.word("or") else ""):
            if joined == "or":
                groups.append([])
            groups[-1].append(_condition(reader))
        stage: tuple[str, Any] = ("where", groups)
    elif reader.word("project"):
        stage = ("project", _named(reader))
    elif reader.word("extend"):
        stage = ("extend", _named(reader))
    elif reader.word("order", "sort"):
        if not reader.word("by"):
            raise KqlError("order needs by, e.g. order by name asc")
        keys = []
        while True:
            expr = reader.expr()
            desc = not reader.word("asc") and reader.word("desc")
            keys.append((expr, desc))
            if not reader.symbol(","):
                break
        stage = ("order", keys)
    elif reader.word("limit", "take"):
        count = reader.literal()
        if not isinstance(count, int) or count < 0:
            raise KqlError("limit needs a whole number")
        stage = ("limit", count)
    else:
        raise KqlError(
            f"{text.split()[0] if text.split() else '(empty)'!r} is not in the simulator's "
            "subset (where, project, extend, order by, limit)"
        )
    if not reader.done():
        raise KqlError(f"cannot read {reader.peek()[1]!r} in {text!r}")
    return stage


def parse(text: str) -> Query:
    """The query, checked; KqlError naming the first part outside the subset."""
    if not isinstance(text, str) or not text.strip():
        raise KqlError("the query is empty")
    head, *stages = _split_pipes(text)
    table = head.lower()
    if table not in TABLES:
        raise KqlError(f"table {head!r} is not simulated (tables: {', '.join(TABLES)})")
    return Query(table, [_stage(s) for s in stages])


def run(query: Query, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Evaluate ``query`` on ``rows`` (its table's)."""
    out = [dict(r) for r in rows]
    for kind, arg in query.stages:
        if kind == "where":
            out = [r for r in out if any(all(c(r) for c in group) for group in arg)]
        elif kind == "project":
            out = [{name: expr(r) for name, expr in arg} for r in out]
        elif kind == "extend":
            out = [{**r, **{name: expr(r) for name, expr in arg}} for r in out]
        elif kind == "order":
            for expr, desc in reversed(arg):
                out.sort(key=_sort_key(expr), reverse=desc)
        else:
            out = out[:arg]
    return out
