"""How fast reconciliation converts an Artemis journal export (``artemis data exp`` XML) to its Parquet
rows, and in how much memory (``spark_dr.artemis_export``: streamed, one message at a time).

The export is made here in Artemis 2.40's format (the shape of ``tests/spark_dr/data/``'s recording):
``--messages`` messages of ``--size`` bytes on ``--queues`` queues, half of them mirrored (with the
mirror's identity properties). Each round converts it in a fresh process and reports messages/s and the
process's peak RSS, and the ratio to a bare lxml parse of the same file in the same round (the floor
of any reader); medians with the range.

    .venv/bin/python bench/artemis_export_bench.py --messages 1000000 --rounds 3
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIRRORED = """      <message id="{id}" priority="4" expiration="0" timestamp="{ts}" type="bytes">
         <properties>
            <property name="x-opt-amq-bkr-id" value="origin-broker" type="simple-string"/>
            <property name="JMS_AMQP_ORIGINAL_ENCODING" value="2" type="short"/>
            <property name="JMS_AMQP_HEADERDURABLE" value="true" type="boolean"/>
            <property name="x-opt-amq-mr-id" value="{id}" type="long"/>
         </properties>
         <queues>
            <queue name="q{q}"/>
         </queues>
         <body>
            <![CDATA[{body}]]>
         </body>
      </message>
"""
LOCAL = MIRRORED.replace(
    '            <property name="x-opt-amq-bkr-id" value="origin-broker" type="simple-string"/>\n', ""
).replace('            <property name="x-opt-amq-mr-id" value="{id}" type="long"/>\n', "")


def write_export(path: Path, messages: int, size: int, queues: int) -> None:
    body = base64.b64encode(b"x" * size).decode()
    with path.open("w") as f:
        f.write('<?xml version="1.0"?>\n<activemq-journal>\n   <bindings>\n')
        for q in range(queues):
            f.write(f'      <address-binding routing-types="ANYCAST" name="q{q}" id="{q * 2 + 1}"/>\n')
            f.write(f'      <queue-binding address="q{q}" filter-string="" name="q{q}" id="{q * 2 + 2}" '
                    'routing-type="ANYCAST"/>\n')  # fmt: skip
        f.write("   </bindings>\n   <messages>\n")
        ts = 1_795_000_000_000
        for i in range(messages):
            template = MIRRORED if i % 2 else LOCAL
            f.write(template.format(id=1000 + i, ts=ts + i, q=i % queues, body=body))
        f.write("   </messages>\n</activemq-journal>\n")


CONVERT = """
import json, resource, sys, time
from pathlib import Path
from spark_dr.export import export_journal
started = time.monotonic()
stats = export_journal(Path(sys.argv[1]), Path(sys.argv[2]), artemis_node="artemis-node")
stats["seconds"] = time.monotonic() - started
stats["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(stats))
"""


# The floor of any reader of the export: lxml walking it, each message cleared, nothing converted.
BARE_PARSE = """
import sys, time
from lxml import etree
started = time.monotonic()
with open(sys.argv[1], "rb") as f:
    for _, elem in etree.iterparse(f, events=("end",), tag="message", huge_tree=True):
        elem.clear()
        while elem.getprevious() is not None:
            del elem.getparent()[0]
print(time.monotonic() - started)
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--size", type=int, default=1024, help="body bytes")
    p.add_argument("--queues", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "export.xml"
        started = time.monotonic()
        write_export(xml, args.messages, args.size, args.queues)
        print(f"export of {args.messages} messages: {xml.stat().st_size / 1e6:.0f} MB written in "
              f"{time.monotonic() - started:.1f} s", flush=True)  # fmt: skip
        rates, rss, ratios = [], [], []
        for n in range(args.rounds):
            out = Path(tmp) / f"round-{n}.parquet"
            done = subprocess.run([sys.executable, "-c", CONVERT, str(xml), str(out)],
                                  capture_output=True, text=True, check=True)  # fmt: skip
            stats = json.loads(done.stdout.strip().splitlines()[-1])
            rates.append(args.messages / stats["seconds"])
            rss.append(stats["peak_rss_mb"])
            bare = subprocess.run([sys.executable, "-c", BARE_PARSE, str(xml)],
                                  capture_output=True, text=True, check=True)  # fmt: skip
            ratios.append(stats["seconds"] / float(bare.stdout.strip()))
            print(f"round {n + 1}: {stats['records']} rows in {stats['seconds']:.1f} s, "
                  f"{rates[-1]:,.0f} messages/s, peak RSS {rss[-1]:.0f} MB; "
                  f"{ratios[-1]:.2f}x a bare parse", flush=True)  # fmt: skip
    print(f"converted: {statistics.median(rates):,.0f} messages/s ({min(rates):,.0f}-{max(rates):,.0f}), "
          f"peak RSS {statistics.median(rss):.0f} MB ({min(rss):.0f}-{max(rss):.0f}); "
          f"conversion ÷ bare parse {statistics.median(ratios):.2f}x "
          f"({min(ratios):.2f}-{max(ratios):.2f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
