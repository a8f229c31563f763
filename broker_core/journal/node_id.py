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


def coordinated_node_id(coordination_id: str) -> str:
    """The node id every peer sharing `coordination-id` uses (seed 001 §2.2.4): Artemis's normalization
    of the string (at most 16 characters, an even number, '-' read as '.'), named as a UUID."""
    text = coordination_id[:16] if len(coordination_id) >= 16 else coordination_id
    if len(text) % 2:
        text += "+"
    return str(uuid.uuid5(uuid.NAMESPACE_OID, "coordination-id:" + text.replace("-", ".")))


def adopt_node_id(directory: Path, node_id: str) -> bool:
    """Make `node_id` this data directory's; whether it changed."""
    directory = Path(directory)
    path = directory / NODE_ID_FILE
    if path.exists() and path.read_text(encoding="ascii").strip() == node_id:
        return False
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(path, (node_id + "\n").encode("ascii"))
    return True
