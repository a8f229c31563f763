"""The broker's node id: a UUID4 created once per data directory and kept for the broker's lifetime.

It is not in the journal because it names the broker, not its data: mirroring identifies messages by
(origin node id, message id), so the id must never change once peers have seen it. A file that exists
but does not hold a UUID is an error, never a reason to make a new id.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from broker_core.journal.files import write_atomically

NODE_ID_FILE = "node-id"


def load_or_create_node_id(directory: Path) -> str:
    """The id stored in ``directory/node-id``, created (atomically and durably) on first use."""
    directory = Path(directory)
    path = directory / NODE_ID_FILE
    if path.exists():
        text = path.read_text(encoding="ascii").strip()
        try:
            return str(uuid.UUID(text))
        except ValueError:
            raise ValueError(f"{path} does not hold a UUID: {text[:64]!r}") from None
    directory.mkdir(parents=True, exist_ok=True)
    node_id = str(uuid.uuid4())
    write_atomically(path, (node_id + "\n").encode("ascii"))
    return node_id
