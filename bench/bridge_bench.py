"""Bridged throughput through a broker-connection sender link, as a ratio of direct throughput.

    .venv/bin/python bench/bridge_bench.py --remote protonc --count 20000 --repeat 3

direct:  rhea sender -> remote           -> rhea receiver on the remote
bridged: rhea sender -> our broker queue -> <sender> link -> remote -> rhea receiver on the remote
Same remote, same generator, same run; the floor for the ratio is 0.7. Our broker forwards durable
messages only after they are on its disk and acks them locally only on the remote's Accepted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.targets import open_target  # noqa: E402
from tests.peers.ports import free_port, wait_until  # noqa: E402
from tests.peers.rhea import Rhea  # noqa: E402
from tests.support.broker import BrokerProcess  # noqa: E402

SETTINGS = """<address-setting match="#">
  <default-address-routing-type>ANYCAST</default-address-routing-type>
</address-setting>"""


def run(send_url: str, recv_url: str, address: str, count: int, size: int, durable: bool) -> float:
    rhea = Rhea()
    with tempfile.TemporaryDirectory() as ready:
        receiver = rhea.start_receive(recv_url, address, count, ready_file=Path(ready) / "r", timeout=600)
        receiver.wait_ready()
        start = time.time()
        sent = rhea.start_send(send_url, address, count, size=size, durable=durable, timeout=600).result(600)
        got = receiver.result(timeout=600)
    if sent.get("accepted") != count or got.get("received") != count:
        raise RuntimeError(f"lost messages: sent {sent}, received {got}")
    return count / (float(got["last_at_ms"]) / 1000 - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--remote", default="protonc", help="protonc | rabbitmq")
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--durable", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-") as tmp, open_target(args.remote, None) as remote:
        host, port = remote.url.removeprefix("amqp://").rsplit(":", 1)
        user = ' user="guest" password="guest"' if args.remote == "rabbitmq" else ""
        link = f'<amqp-connection uri="tcp://{host}:{port}" name="remote"{user}><sender address-match="#"/>'
        ours = BrokerProcess(
            Path(tmp) / "ours",
            port=free_port(),
            xml_kwargs={
                "address_settings": SETTINGS,
                "extra": f"<broker-connections>{link}</amqp-connection></broker-connections>",
            },
        )
        ours.start()
        wait_until(lambda: "AMQ111003" in ours.log(), 30, "the broker connection to come up")
        direct, bridged = [], []
        try:
            for _ in range(args.repeat):
                addr = remote.make_address(args.durable)
                direct.append(run(remote.url, remote.url, addr, args.count, args.size, args.durable))
                addr = remote.make_address(args.durable)
                bridged.append(run(ours.url, remote.url, addr, args.count, args.size, args.durable))
        finally:
            ours.stop()
    ratios = [b / d for b, d in zip(bridged, direct, strict=True)]
    kind = "durable" if args.durable else "non-durable"
    print(f"{args.count} x {args.size} B {kind}, remote {args.remote}, {args.repeat} runs, rhea 1S/1R")
    print(f"  direct   msgs/s median {statistics.median(direct):8.0f}  ({min(direct):.0f}-{max(direct):.0f})")
    print(
        f"  bridged  msgs/s median {statistics.median(bridged):8.0f}  ({min(bridged):.0f}-{max(bridged):.0f})"
    )
    spread = f"({min(ratios):.2f}-{max(ratios):.2f})"
    print(f"  ratio bridged/direct    {statistics.median(ratios):.2f}  {spread}  floor 0.7")


if __name__ == "__main__":
    main()
