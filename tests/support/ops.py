"""Brokers with their metrics endpoint on (tests/ops/): a mirrored pair, scraping, parsing."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.peers.ports import free_port, wait_until
from tests.support.broker import BrokerProcess

ORDERS = '<address name="orders"><anycast><queue name="orders"/></anycast></address>'
PLUGIN = "org.amqp_mirror.metrics.PrometheusMetricsPlugin"


def metrics_xml(port: int, queues: str = "orders", addresses: str = "orders", **properties: str) -> str:
    given = {k.replace("_", "-"): v for k, v in properties.items()}
    props = {"port": str(port), "queues": queues, "addresses": addresses, **given}
    inner = "".join(f'<property key="{k}" value="{v}"/>' for k, v in props.items())
    return f'<metrics><plugin class-name="{PLUGIN}">{inner}</plugin></metrics>'


def mirror_xml(name: str, port: int, attrs: str = "") -> str:
    connection = f'<amqp-connection uri="tcp://127.0.0.1:{port}" name="{name}" retry-interval="200">'
    return f"<broker-connections>{connection}<mirror {attrs}/></amqp-connection></broker-connections>"


@dataclass
class Metered:
    broker: BrokerProcess
    metrics_port: int

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def get(self, path: str = "/metrics") -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.metrics_url + path, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of a scrape, by (name, sorted labels)."""
        status, text = self.get()
        assert status == 200, text
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def value(self, name: str, **labels: str) -> float | None:
        key = (name, tuple(sorted(labels.items())))
        return self.samples().get(key)


def metered(home: Path, name: str, port: int | None = None, extra: str = "", **xml: object) -> Metered:
    metrics_port = free_port()
    broker = BrokerProcess(
        home / name,
        name=name,
        port=port or free_port(),
        xml_kwargs={"addresses": ORDERS, "extra": metrics_xml(metrics_port) + extra, **xml},
    )
    return Metered(broker, metrics_port)


def mirrored_pair(home: Path, dc1_mirror: str = "", dc2_mirror: str = "") -> tuple[Metered, Metered]:
    """DC1 and DC2 mirroring each other, metrics on, both links up."""
    p1, p2 = free_port(), free_port()
    dc1 = metered(home, "dc1", p1, mirror_xml("DC2", p2, dc1_mirror))
    dc2 = metered(home, "dc2", p2, mirror_xml("DC1", p1, dc2_mirror))
    dc1.broker.start()
    dc2.broker.start()
    wait_until(
        lambda: "AMQ111003" in dc1.broker.log() and "AMQ111003" in dc2.broker.log(),
        20,
        "both mirrors to connect",
    )
    return dc1, dc2
