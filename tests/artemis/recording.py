"""Record what a real Artemis mirror source puts on the wire, to replay it where there is no Java.

    .venv/bin/python -m tests.artemis.recording tests/conformance/artemis_mirror_recording.json

Starts one Artemis whose `<mirror>` goes to a scripted target (``tests/support/peer``), drives it through
a fixed scenario (the topology it announces at start, a management request, a send and a consume, an
expiry, a rejection to the DLA, a management removal, a queue and an address removed) and writes every
delivery's exact bytes, step by step, with Artemis's Open and attach. ``tests/conformance/
test_artemis_recording.py`` replays the file into our broker; ``tests/artemis/test_recording.py``
checks that the Artemis installed here still speaks as the file says.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.artemis.support import artemis, call, config, depth, send_to_queue
from tests.peers.artemis import ARTEMIS_VERSION
from tests.peers.ports import free_port, wait_until
from tests.support.client import connect, receive
from tests.support.peer import LinkReply, ScriptedServer, TransferRecord

TARGET_ID = "recorded-target-id"


def _steps(url: str, broker: Any) -> list[tuple[str, Callable[[], None]]]:
    def reject_one() -> None:
        send_to_queue(broker, "recq", ["rejected"])
        with connect(url) as conn:
            receiver = conn.create_receiver("recq", credit=1)
            receiver.receive(timeout=10)
            receiver.reject()

    def expire_one() -> None:
        send_to_queue(broker, "recq", ["expiring"], ttl=0.3)
        wait_until(lambda: depth(broker, "ExpiryQueue") == 1, 30, "Artemis to expire the message")

    return [
        ("management request (a reply through a temporary queue)", lambda: depth(broker, "orders")),
        ("send and consume", lambda: (send_to_queue(broker, "recq", ["hello"]), receive(url, "recq", 1))),
        ("expiry", expire_one),
        ("rejected to the DLA", reject_one),
        ("removeMessages", lambda: (send_to_queue(broker, "recq", ["removed"]), _remove(broker))),
        ("destroyQueue", lambda: call(broker, "destroyQueue", "recq")),
        ("deleteAddress", lambda: call(broker, "deleteAddress", "recq")),
    ]


def _remove(broker: Any) -> None:
    call(broker, "removeMessages", "", resource="queue.recq")


def record(workdir: Path) -> dict[str, Any]:
    with ScriptedServer(LinkReply.mirror_target(TARGET_ID)) as peer:
        port = free_port()
        target_port = int(peer.url.rsplit(":", 1)[1])
        mirror = (
            f'<amqp-connection uri="tcp://127.0.0.1:{target_port}" name="rec" retry-interval="200">'
            "<mirror/></amqp-connection>"
        )
        source = artemis(workdir / "artemis", port, config(port, mirror)).start()
        try:
            attach = peer.wait_for_attach(timeout=60)
            steps: list[dict[str, Any]] = []
            _settle(peer, steps, "topology announced at start")
            for name, act in _steps(source.url, source):
                act()
                _settle(peer, steps, name)
            opens = [f for f in peer.records.frames if f.name == "open"]
            return {
                "artemis_version": ARTEMIS_VERSION,
                "source_node_id": attach["properties"][_sym("x-opt-amq-bkr-id")],
                "open_properties": {str(k): v for k, v in (opens[0]["properties"] or {}).items()},
                "open_idle_time_out": int(opens[0]["idle_time_out"]),
                "attach_desired_capabilities": [str(c) for c in attach["desired_capabilities"]],
                "steps": steps,
            }
        finally:
            source.stop()


def _sym(name: str) -> Any:
    from proton import symbol

    return symbol(name)


def _settle(peer: ScriptedServer, steps: list[dict[str, Any]], name: str) -> None:
    """Wait until no new delivery came for a second, then note the step's deliveries."""
    seen = sum(len(s["deliveries"]) for s in steps)
    last = [len(peer.transfers), 0]

    def quiet() -> bool:
        now = len(peer.transfers)
        if now != last[0]:
            last[0], last[1] = now, 0
            return False
        last[1] += 1
        return last[1] >= 8 and now > seen

    wait_until(quiet, 30, f"Artemis's events for step {name!r}")
    new: list[TransferRecord] = peer.transfers[seen:]
    steps.append(
        {
            "step": name,
            "deliveries": [{"format": t.message_format, "payload": t.payload.hex()} for t in new],
        }
    )


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path("artemis_mirror_recording.json")
    with tempfile.TemporaryDirectory(prefix="artemis-record-") as tmp:
        recording = record(Path(tmp))
    out.write_text(json.dumps(recording, indent=1) + "\n")
    total = sum(len(s["deliveries"]) for s in recording["steps"])
    print(f"{out}: {total} deliveries in {len(recording['steps'])} steps", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
