"""The console's building blocks without a socket: escaping, sessions and their expiry, rates."""

from __future__ import annotations

from typing import Any

from amqp_mirror.console.markup import Markup, esc, href, join, table, tag
from amqp_mirror.console.rates import Rates
from amqp_mirror.console.server import _local, _printable
from amqp_mirror.console.sessions import MAX_AGE, Sessions, cookie_header

HOSTILE = "\"'><script>alert(1)</script>&amp;"


def test_every_argument_is_escaped_quotes_included_but_markup_made_here_is_not() -> None:
    cell = tag('<td title="{}">{}</td>', HOSTILE, HOSTILE)
    assert "<script>" not in cell and "\"'>" not in cell
    assert cell.count("&lt;script&gt;") == 2 and cell.count("&quot;") == 2 and cell.count("&#x27;") == 2
    assert "&amp;amp;" in cell  # an entity from outside is shown as typed, not interpreted
    inner = tag("<b>{}</b>", "x")
    assert tag("<p>{}</p>", inner) == "<p><b>x</b></p>"  # Markup passes through once, not escaped twice
    assert join(["<i>", inner]) == "&lt;i&gt;<b>x</b>"
    assert esc(None) == "" and isinstance(esc(1), Markup)


def test_a_table_escapes_its_cells_and_a_link_encodes_its_query() -> None:
    rendered = table(["queue"], [[HOSTILE], [Markup("<a>ok</a>")]])
    assert "<script>" not in rendered and "<a>ok</a>" in rendered
    assert href("/queue", name="a&b <c>", page=2) == "/queue?name=a%26b+%3Cc%3E&amp;page=2"
    assert table(["x"], [], "nothing") == '<p class="empty">nothing</p>'


def test_a_page_goes_back_only_to_a_path_of_this_console() -> None:
    assert _local("/queue?name=orders") == "/queue?name=orders"
    for elsewhere in ("//evil.example/", "https://evil.example/", "javascript:alert(1)", "/\\evil", ""):
        assert _local(elsewhere) == "/"


def test_a_name_in_a_log_line_cannot_start_another_line() -> None:
    assert _printable("orders\nAMQ951083: forged") == "orders\\nAMQ951083: forged"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_lives_while_used_and_ends_after_its_idle_timeout_or_its_maximum_age() -> None:
    clock = Clock()
    sessions = Sessions(timeout=60, clock=clock)
    session = sessions.new("admin")
    assert len(session.id) >= 40 and len(session.csrf) >= 40 and session.id != session.csrf
    clock.now += 59
    assert sessions.get(session.id) is session  # used: its idle clock starts again
    clock.now += 59
    assert sessions.get(session.id) is session
    clock.now += 61
    assert sessions.get(session.id) is None
    assert sessions.get(session.id) is None and len(sessions) == 0  # gone, not only hidden

    busy = sessions.new("admin")
    while clock.now - busy.started <= MAX_AGE:
        clock.now += 50
        if clock.now - busy.started <= MAX_AGE:
            assert sessions.get(busy.id) is busy
    assert sessions.get(busy.id) is None, "a session used all the time outlived its maximum age"


def test_the_csrf_token_is_the_session_s_own() -> None:
    sessions = Sessions(timeout=60)
    one, other = sessions.new("a"), sessions.new("a")
    assert one.csrf_matches(one.csrf)
    assert not one.csrf_matches(other.csrf) and not one.csrf_matches(None) and not one.csrf_matches("")


def test_sessions_are_bounded_the_least_recently_used_going_first(monkeypatch: Any) -> None:
    import amqp_mirror.console.sessions as module

    monkeypatch.setattr(module, "CAPACITY", 3)
    sessions = Sessions(timeout=60)
    first, second, third = (sessions.new("u") for _ in range(3))
    assert sessions.get(first.id) is first  # used: now the most recent
    sessions.new("u")
    assert len(sessions) == 3 and sessions.get(second.id) is None and sessions.get(first.id) is first
    assert sessions.get(third.id) is third


def test_the_cookie_says_http_only_strict_and_secure_under_tls() -> None:
    session = Sessions(timeout=60).new("admin")
    name, plain = cookie_header(session, 60, secure=False)
    assert (
        name == "Set-Cookie"
        and plain == f"amqp_mirror_console={session.id}; Path=/; HttpOnly; SameSite=Strict; Max-Age=60"
    )
    assert cookie_header(session, 60, secure=True)[1].endswith("; Secure")


class _Queue:
    def __init__(self, name: str) -> None:
        self.name, self.added, self.acked = name, 0, 0


def test_a_rate_is_the_counters_difference_over_the_last_interval() -> None:
    clock = Clock()
    rates = Rates(clock)
    q = _Queue("orders")
    assert rates.of("orders") == (0.0, 0.0)  # no two samples yet
    rates.sample([q])  # type: ignore[list-item]
    q.added, q.acked = 50, 20
    clock.now += 5
    rates.sample([q])  # type: ignore[list-item]
    assert rates.of("orders") == (10.0, 4.0)
    clock.now += 5
    rates.sample([q])  # type: ignore[list-item]
    assert rates.of("orders") == (0.0, 0.0)  # nothing since
    assert rates.of("unknown") == (0.0, 0.0)
