"""The web console: a broker's state and its operator's actions, in a browser (docs/console.md).

Served on the broker's own event loop from the acceptor with `protocols=CONSOLE` in broker.xml (off
without one), with its TLS when it has one. Pages are rendered on the server from the broker's parts
(views.py); every action goes through the management operations Artemis's tools use (actions.py),
after the checks of server.py: a login with the broker's users, a session cookie, a CSRF token, and the
`view`, `browse` or `manage` permission of `<security-settings>`.
"""

from .server import Console

__all__ = ["Console"]
