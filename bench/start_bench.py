"""How long a broker takes to start on an existing journal: recovery plus rebuilding its queues.

    python bench/start_bench.py JOURNAL_DIR [--repeat 3]

JOURNAL_DIR is any journal directory, e.g. one side of ``bench.dr_generate`` (its 1 M-message side holds
2.7 M records, 305 000 of them live messages). Each round copies it to a temp dir (a start may cut a
torn tail or compact) and times ``Server.start()`` in this process, on a minimal config.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from broker_core.config import load_config  # noqa: E402
from broker_core.server import Server  # noqa: E402
from tests.peers.ports import free_port  # noqa: E402

CONFIG = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>start-bench</name>
  <persistence-enabled>true</persistence-enabled>
  <security-enabled>false</security-enabled>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP</acceptor></acceptors>
</core></configuration>
"""


def one_start(source: Path) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="start-bench-") as tmp:
        journal = Path(tmp) / "journal"
        shutil.copytree(source, journal)
        xml = Path(tmp) / "broker.xml"
        xml.write_text(CONFIG.format(journal=journal, port=free_port()))
        config, _ = load_config(xml)
        server = Server(config, log=logging.getLogger("start-bench"))
        started = time.monotonic()
        server.start()
        seconds = time.monotonic() - started
        messages = sum(q.depth for q in server.queues.values())
        server.stop()
        return seconds, messages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("journal", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    runs = [one_start(args.journal) for _ in range(args.repeat)]
    times = [t for t, _ in runs]
    spread = {"median": statistics.median(times), "min": min(times), "max": max(times)}
    print(json.dumps({"start_s": {k: round(v, 2) for k, v in spread.items()}, "messages": runs[0][1]}))


if __name__ == "__main__":
    main()
