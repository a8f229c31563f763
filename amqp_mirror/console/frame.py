"""The frame of every console page: who is looking, the layout, forms, and the notices pages share.

Every value from outside goes through `markup.tag` or `markup.table`, so it is escaped. Forms that change
something are POSTs carrying the session's CSRF token, and an action's button is shown only to a user
who may manage (the action checks again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .markup import Markup, join, tag
from .rates import Rates

if TYPE_CHECKING:
    from ..broker import Broker
    from ..ops.node import Node
    from .sessions import Session

REFRESH_SECONDS = 5

NAV = (
    ("/", "Overview"),
    ("/addresses", "Addresses"),
    ("/queues", "Queues"),
    ("/connections", "Connections"),
    ("/broker-connections", "Broker connections"),
)


@dataclass
class View:
    node: Node
    session: Session
    rates: Rates
    started: float  # when the console started (about when the process did)
    may_manage: bool
    path: str  # the page asked for, with its query: where an action comes back to

    @property
    def broker(self) -> Broker:
        return self.node.broker

    @property
    def serving(self) -> bool:
        """Whether this server's broker is assembled and serving (an HA backup's is not, while passive)."""
        return self.node.active()

    def who(self) -> str:
        return self.session.user or "anonymous (security disabled)"


# ------------------------------------------------------------------------------------------ the frame


def layout(title: str, content: Markup, view: View | None, refresh: bool = False) -> bytes:
    nav = Markup("")
    if view is not None:
        links = join(
            tag(
                '<a href="{}"{}>{}</a>',
                path,
                Markup(' class="here"') if view.path.split("?")[0] == path else Markup(""),
                label,
            )
            for path, label in NAV
        )
        nav = tag(
            '<nav>{}<span class="who">{} on <b>{}</b> {}</span></nav>',
            links,
            view.who(),
            view.node.name,
            form("/logout", "Log out", view.session, {}) if view.session.user is not None else "",
        )
        flashes = join(
            tag('<p class="flash {}">{}</p>', kind, message) for kind, message in view.session.flash
        )
        view.session.flash.clear()
        content = Markup(flashes + content)
    attrs = tag(' data-refresh="{}"', REFRESH_SECONDS) if refresh else Markup("")
    page = tag(
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<title>{} - amqp-mirror</title><link rel="stylesheet" href="/static/console.css">'
        '<script src="/static/console.js" defer></script></head>'
        "<body><header><h1>amqp-mirror</h1>{}</header><main{}><h2>{}</h2>{}</main></body></html>",
        title,
        nav,
        attrs,
        title,
        content,
    )
    return page.encode()


def form(
    action: str,
    button: str,
    session: Session,
    fields: dict[str, object],
    confirm: str | None = None,
    extra: Markup | None = None,
) -> Markup:
    """A POST form with the session's CSRF token; `confirm`: asked before it is sent (console.js)."""
    hidden = join(
        tag('<input type="hidden" name="{}" value="{}">', k, v)
        for k, v in {"csrf": session.csrf, **fields}.items()
    )
    ask = tag(' data-confirm="{}"', confirm) if confirm else Markup("")
    return tag(
        '<form method="post" action="{}"{}>{}{}<button type="submit">{}</button></form>',
        action,
        ask,
        hidden,
        extra or "",
        button,
    )


def action(view: View, do: str, button: str, confirm: str | None = None, **fields: object) -> Markup:
    """A button for one action, shown only to a user who may manage."""
    if not view.may_manage:
        return Markup("")
    return form("/action", button, view.session, {"do": do, "back": view.path, **fields}, confirm)


def passive(view: View) -> Markup:
    ha = view.node.ha
    where = ha.status().get("partner") if ha is not None else None
    return tag(
        '<p class="notice">This server is {} ({}): it serves no client, and has no queues to show. '
        "The active server is {}.</p>",
        view.node.state(),
        view.node.role(),
        where or "not known here",
    )


def not_allowed(what: str) -> Markup:
    return tag('<p class="notice">{}</p>', what)


def facts(facts: list[tuple[str, object]]) -> Markup:
    return tag("<dl>{}</dl>", join(tag("<dt>{}</dt><dd>{}</dd>", k, v) for k, v in facts))


# ------------------------------------------------------------------------------------------ login


def login(session: Session, failed: bool, user: str) -> Markup:
    note = Markup('<p class="flash error">Wrong user name or password.</p>') if failed else Markup("")
    fields = tag(
        '<label>User <input name="user" value="{}" autocomplete="username" autofocus></label>'
        '<label>Password <input name="password" type="password" autocomplete="current-password"></label>',
        user,
    )
    return Markup(note + form("/login", "Log in", session, {}, extra=fields))
