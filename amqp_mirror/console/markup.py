"""HTML built so that nothing from a client or a peer can become markup.

Queue and address names, message properties and bodies, user and connection names come from clients or
from another broker: any of them may hold `<script>` or a quote. Pages are built only with `tag()`,
whose template is this module's caller's own text and whose arguments are escaped (quotes included, so
they are safe inside an attribute too), unless they are `Markup` made here already. A link's query is
URL-encoded, then escaped.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from urllib.parse import urlencode


class Markup(str):
    """Text that is HTML already: made by `tag`, `join` or `link`, never from outside input."""

    __slots__ = ()


def esc(value: object) -> Markup:
    """`value` as HTML text: escaped, unless it is Markup already."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def tag(template: str, *args: object) -> Markup:
    """`template` (the caller's own HTML, `{}` for each argument) with every argument escaped."""
    return Markup(template.format(*(esc(a) for a in args)))


def join(parts: Iterable[object], separator: str = "") -> Markup:
    return Markup(separator.join(esc(p) for p in parts))


def href(path: str, **query: object) -> Markup:
    """A link to this console's `path` with `query`, for an href attribute."""
    pairs = {k: str(v) for k, v in query.items() if v is not None}
    return esc(f"{path}?{urlencode(pairs)}" if pairs else path)


def table(header: Iterable[str], rows: Iterable[Iterable[object]], empty: str = "none") -> Markup:
    """A table: header cells are the caller's text, row cells are escaped unless Markup."""
    head = join(tag("<th>{}</th>", h) for h in header)
    body = [join(tag("<td>{}</td>", cell) for cell in row) for row in rows]
    if not body:
        return tag('<p class="empty">{}</p>', empty)
    return tag("<table><thead><tr>{}</tr></thead><tbody>{}</tbody></table>", head,
               join(tag("<tr>{}</tr>", row) for row in body))  # fmt: skip
