"""Start our broker for the benchmark harness: `--broker-cmd "python bench/ours_broker.py {workdir} {port}"`.

A third argument, a port, turns the Prometheus endpoint on there (`compare.py --systems ours,ours-metrics`
measures what metrics cost, scraped every second, in the same run).

Fresh `bench-*` addresses are auto-created as durable anycast queues (default-address-routing-type
ANYCAST), the usual Artemis setting for AMQP point-to-point traffic, so durable messages are journalled
and fsynced before they are Accepted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

XML = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq">
  <core xmlns="urn:activemq:core">
    <name>bench</name>
    <persistence-enabled>true</persistence-enabled>
    <security-enabled>false</security-enabled>
    <journal-directory>data/journal</journal-directory>
    <bindings-directory>data/bindings</bindings-directory>
    <paging-directory>data/paging</paging-directory>
    <large-messages-directory>data/large-messages</large-messages-directory>
    <acceptors><acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP</acceptor></acceptors>
    <address-settings>
      <address-setting match="#">
        <default-address-routing-type>ANYCAST</default-address-routing-type>
        <default-queue-routing-type>ANYCAST</default-queue-routing-type>
      </address-setting>
    </address-settings>
    {metrics}
  </core>
</configuration>
"""


def bench_broker_xml(port: int | str, metrics: str = "") -> str:
    """The broker.xml of the harness, for our broker and for Artemis alike (`metrics`: ours only)."""
    return XML.replace("{port}", str(port)).replace("{metrics}", metrics)


if __name__ == "__main__":
    workdir, port = Path(sys.argv[1]), sys.argv[2]
    metrics = ""
    if len(sys.argv) > 3:  # the queues' depth and age are exported too, as an operator would have them
        metrics = (
            '<metrics><plugin class-name="org.amqp_mirror.metrics.PrometheusMetricsPlugin">'
            f'<property key="port" value="{int(sys.argv[3])}"/><property key="queues" value="bench-#"/>'
            "</plugin></metrics>"
        )
    etc = workdir / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "broker.xml").write_text(bench_broker_xml(port, metrics))
    argv = [
        sys.executable,
        "-m",
        "amqp_mirror",
        "run",
        "--config",
        str(etc / "broker.xml"),
        "--log-level",
        "WARNING",
    ]
    os.chdir(workdir)  # `-m` looks in the working directory first: never a checkout's packages by accident
    os.execv(sys.executable, argv)
