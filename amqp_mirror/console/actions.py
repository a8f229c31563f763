"""What an operator can do from the console, each through the broker's management operations.

An action is a POST to `/action` with `do` naming it; the server has checked the session, its CSRF token
and the `manage` permission before. Each runs Artemis's management operation in process, with the user
as the requester (so the management log lines, AMQ95106x, name them too), and answers one sentence
for the page and the console's log line (AMQ951083).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_core.management import BROKER

if TYPE_CHECKING:
    from ..broker import Broker


class BadAction(ValueError):
    """The form does not say what to do (an unknown action, a missing or malformed field)."""


Run = Callable[["Call", dict[str, str]], str]


class Call:
    """The management table of one broker, called on behalf of one user."""

    def __init__(self, broker: Broker, user: str | None) -> None:
        self.broker = broker
        self.user = user

    def __call__(self, resource: str, operation: str, *params: Any) -> Any:
        management = self.broker.management
        management.requester = self.user
        try:
            return management.invoke(resource, operation, list(params))
        finally:
            management.requester = None


def _field(form: dict[str, str], name: str) -> str:
    value = form.get(name, "")
    if not value:
        raise BadAction(f"the form has no {name}")
    return value


def _queue(call: Call, form: dict[str, str], name: str = "queue") -> str:
    """The queue the form names: one of the clients' (a mirror's store-and-forward queue is the broker's
    own; what it holds is owed to the other side, and is left to the mirror)."""
    queue = _field(form, name)
    found = call.broker.server.queues.get(queue)
    if found is not None and found.internal:
        raise BadAction(f"queue {queue} is internal to the broker: the console leaves it alone")
    return queue


def _purge(call: Call, form: dict[str, str]) -> str:
    queue = _queue(call, form)
    n = call(f"queue.{queue}", "removeAllMessages")
    return f"queue {queue}: {n} messages removed"


def _remove_message(call: Call, form: dict[str, str]) -> str:
    queue, message_id = _queue(call, form), _number(form, "id")
    removed = call(f"queue.{queue}", "removeMessage", message_id)
    if removed:
        return f"queue {queue}: message {message_id} removed"
    return f"queue {queue}: message {message_id} is not waiting any more (consumed, or being delivered)"


def _move(call: Call, form: dict[str, str]) -> str:
    queue, other = _queue(call, form), _queue(call, form, "to")
    count = _number(form, "count") if form.get("count", "").strip() else -1
    # moveMessages(flushLimit, filter, otherQueueName, rejectDuplicates, messageCount)
    n = call(f"queue.{queue}", "moveMessages", -1, "", other, False, count)
    return f"queue {queue}: {n} messages moved to queue {other}"


def _retry(call: Call, form: dict[str, str]) -> str:
    queue = _queue(call, form)
    n = call(f"queue.{queue}", "retryMessages")
    return f"queue {queue}: {n} messages retried to their original queues"


def _pause(call: Call, form: dict[str, str]) -> str:
    queue = _queue(call, form)
    call(f"queue.{queue}", "pause")
    return f"queue {queue} paused: its messages are kept, none is delivered"


def _resume(call: Call, form: dict[str, str]) -> str:
    queue = _queue(call, form)
    call(f"queue.{queue}", "resume")
    return f"queue {queue} resumed"


def _start_connection(call: Call, form: dict[str, str]) -> str:
    name = _field(form, "name")
    call(BROKER, "startBrokerConnection", name)
    return f"broker connection {name} started"


def _stop_connection(call: Call, form: dict[str, str]) -> str:
    name = _field(form, "name")
    call(BROKER, "stopBrokerConnection", name)
    return f"broker connection {name} stopped"


def _failover(call: Call, form: dict[str, str]) -> str:
    call(BROKER, "forceFailover")
    return "failover requested: this server stops and its backup takes over"


def _number(form: dict[str, str], name: str) -> int:
    try:
        return int(_field(form, name).strip())
    except ValueError:
        raise BadAction(f"{name} must be a whole number") from None


ACTIONS: dict[str, Run] = {
    "purge": _purge,
    "remove-message": _remove_message,
    "move": _move,
    "retry": _retry,
    "pause": _pause,
    "resume": _resume,
    "start-connection": _start_connection,
    "stop-connection": _stop_connection,
    "failover": _failover,
}


def describe(form: dict[str, str]) -> str:
    """What a form asks, for a log line about a refused one: the action and what it names."""
    named = ", ".join(f"{k} {form[k]!r}" for k in ("queue", "name", "to", "id") if form.get(k))
    return f"{form.get('do', '?')}" + (f" ({named})" if named else "")
