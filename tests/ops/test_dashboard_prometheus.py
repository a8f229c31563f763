"""Every Grafana panel's query against a real Prometheus scraping a real mirrored pair under traffic.

Debian's `prometheus` scrapes DC1 and DC2 (metrics on, DC1's mirror in sync mode) every second and a
Pushgateway holding what the DR job pushes (spark_dr.pushgateway, the job's own exposition of a
result); the alert rules are loaded too. Each panel query of deploy/grafana/amqp-mirror.json, with the
dashboard's variables as Grafana fills them, must parse and return data.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_dr.pushgateway import exposition, push
from tests.conftest import require
from tests.peers.ports import free_port, wait_until
from tests.support.broker import REPO
from tests.support.client import receive, send
from tests.support.ops import Metered, mirrored_pair

DASHBOARD = REPO / "deploy" / "grafana" / "amqp-mirror.json"
RULES = REPO / "deploy" / "prometheus" / "amqp-mirror-rules.yml"
# What Grafana puts in for the dashboard's variables: every broker, and a rate window of a few scrapes
VARIABLES = {"$__rate_interval": "10s", "$instance": ".+"}


def _start(command: list[str], log: Path, ready_url: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{command[0]} exited:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(ready_url, timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    wait_until(up, 30, f"{command[0]} to be ready")
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _dr_result() -> dict[str, Any]:
    """A reconciliation that found one side behind: what the DR job pushes after a run."""
    return {
        "generated_at_ms": int(time.time() * 1000) - 3_600_000,
        "seconds": 42.0,
        "counts": {"in_sync": 1000, "only_dc1": 3},
        "by_address": [{"address": "orders", "class": "only_dc1", "side": "dc1", "count": 3}],
        "sides": {
            "dc1": {"unmirrored_messages": 3, "unmirrored_events": 1, "recovery_point_gap_ms": 1500},
            "dc2": {"unmirrored_messages": 0, "unmirrored_events": 0, "recovery_point_gap_ms": 0},
        },
        "survivor_in_sync": False,
    }


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require("prometheus", shutil.which("prometheus") is not None, "install Debian's prometheus package")
    require(
        "pushgateway",
        shutil.which("prometheus-pushgateway") is not None,
        "install Debian's prometheus-pushgateway package",
    )
    home = tmp_path_factory.mktemp("prometheus")
    dc1, dc2 = mirrored_pair(home, dc1_mirror='sync="true"')
    gateway_port, prom_port = free_port(), free_port()
    procs = []
    traffic = _Traffic(dc1, dc2)
    try:
        gateway = f"http://127.0.0.1:{gateway_port}"
        procs.append(
            _start(
                [
                    "prometheus-pushgateway",
                    f"--web.listen-address=127.0.0.1:{gateway_port}",
                    # its own state: Debian's build keeps what was pushed in a shared file otherwise
                    f"--persistence.file={home / 'pushgateway.data'}",
                ],
                home / "pushgateway.log",
                gateway + "/-/ready",
            )
        )
        push(exposition(_dr_result()), gateway)  # the pair DC1-DC2
        push(exposition({**_dr_result(), "survivor_in_sync": True}), gateway, pair="DC3-DC4")
        config = home / "prometheus.yml"
        config.write_text(_config(dc1, dc2, gateway_port))
        url = f"http://127.0.0.1:{prom_port}"
        procs.append(
            _start(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={home / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                    "--log.level=warn",
                ],
                home / "prometheus.log",
                url + "/-/ready",
            )
        )
        traffic.start()
        # three scrapes of every target, with traffic between them: every rate has its two samples
        wait_until(lambda: _scrapes(url) >= 3, 30, "three scrapes of each target")
        yield url
    finally:
        traffic.stop()
        for proc in procs:
            _stop(proc)
        dc1.broker.stop()
        dc2.broker.stop()


class _Traffic:
    """Sends on DC1 and consumes on DC2 in rounds, until stopped (bounded: a few hundred messages)."""

    def __init__(self, dc1: Metered, dc2: Metered) -> None:
        self.dc1, self.dc2 = dc1, dc2
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        for round_no in range(30):
            if self._stop.is_set():
                return
            send(self.dc1.broker.url, "orders", [f"r{round_no}-{i}" for i in range(10)])
            receive(self.dc2.broker.url, "orders", 5, timeout=5)
            self._stop.wait(0.3)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def _config(dc1: Metered, dc2: Metered, gateway_port: int) -> str:
    brokers = json.dumps([f"127.0.0.1:{dc1.metrics_port}", f"127.0.0.1:{dc2.metrics_port}"])
    return f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {RULES}
scrape_configs:
  - job_name: amqp-mirror
    static_configs:
      - targets: {brokers}
  - job_name: pushgateway
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:{gateway_port}"]
"""


def _query(url: str, expr: str) -> dict[str, Any]:
    query = urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=10) as r:
            return dict(json.loads(r.read()))
    except urllib.error.HTTPError as exc:  # a query that does not parse: 400 with the reason
        return dict(json.loads(exc.read()))


def _scrapes(url: str) -> int:
    answer = _query(url, "min(count_over_time(up[1m]))")
    result = answer.get("data", {}).get("result", [])
    up = _query(url, "sum(up)").get("data", {}).get("result", [])
    if not result or not up or float(up[0]["value"][1]) < 3:
        return 0
    return int(float(result[0]["value"][1]))


def _panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            found.append((panel["title"], expr))
    return found


def test_the_dashboard_covers_what_the_operator_needs() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    rows = {p["title"] for p in dashboard["panels"] if p["type"] == "row"}
    assert {
        "Link health",
        "Mirror backlog against the RPO",
        "Throughput",
        "Mirror latency",
        "Target side, per origin broker",
        "Journal and disk",
        "High availability",
        "Last DR reconciliation",
    } <= rows
    assert len(_panel_queries()) >= 35


def test_every_panel_query_parses_and_returns_data(prometheus: str) -> None:
    empty, failed = [], []
    for title, expr in _panel_queries():
        answer = _query(prometheus, expr)
        if answer.get("status") != "success":
            failed.append(f"{title}: {expr}: {answer.get('error')}")
        elif not answer["data"]["result"]:
            empty.append(f"{title}: {expr}")
    assert not failed, "queries that do not parse:\n" + "\n".join(failed)
    assert not empty, "queries without data:\n" + "\n".join(empty)


def test_the_instance_variable_lists_both_brokers(prometheus: str) -> None:
    query = urllib.parse.urlencode({"match[]": "amqp_mirror_build_info"})
    with urllib.request.urlopen(f"{prometheus}/api/v1/label/instance/values?{query}", timeout=10) as r:
        assert len(json.loads(r.read())["data"]) == 2


def test_the_alert_rules_load_and_evaluate(prometheus: str) -> None:
    def rules() -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{prometheus}/api/v1/rules", timeout=10) as r:
            groups = json.loads(r.read())["data"]["groups"]
        return [rule for g in groups for rule in g["rules"]]

    wait_until(lambda: all(r.get("lastEvaluation", "").startswith("2") for r in rules()), 20, "an evaluation")
    loaded = rules()
    assert len(loaded) == len(re.findall(r"^\s+- alert: ", RULES.read_text(), flags=re.M))
    assert all(r["health"] == "ok" for r in loaded), [(r["name"], r.get("lastError")) for r in loaded]
    divergence = next(r for r in loaded if r["name"] == "AmqpMirrorDRDivergence")
    assert divergence["state"] == "firing"  # the pushed result says the survivor needs a repair


def test_two_dc_pairs_on_one_pushgateway_do_not_overwrite_each_other(prometheus: str) -> None:
    """Each reconciliation's series carry its DC pair (the Pushgateway group it was pushed to)."""

    def by_pair() -> dict[str, float]:
        result = _query(prometheus, "amqp_mirror_dr_survivor_in_sync").get("data", {}).get("result", [])
        return {r["metric"].get("pair", ""): float(r["value"][1]) for r in result}

    wait_until(lambda: len(by_pair()) == 2, 10, "both pairs' results in Prometheus")
    assert by_pair() == {"DC1-DC2": 0.0, "DC3-DC4": 1.0}
