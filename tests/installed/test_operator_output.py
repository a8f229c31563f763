"""What the installed `amqp-mirror` command says to an operator, run as a process as a user runs it:
a first send that no queue keeps is said in the log and in `status`; a reader that stops reading
(`status | head`) is no error; a broker that cannot be reached, or wants a login, or a port that is not
AMQP, is explained in a sentence; `ha status` and `connections list` print words, not Python values."""

from __future__ import annotations

import subprocess
from pathlib import Path

from connections.cli import request
from tests.peers.ports import free_port, wait_until
from tests.support.client import send
from tests.support.installed import Installation, broker_xml, repository_env, stop, wait_listening


def _start(
    installation: Installation, home: Path, name: str, extra: str = "", secure: bool = False
) -> tuple[int, subprocess.Popen[bytes], Path]:
    config = home / name / "etc" / "broker.xml"
    port = broker_xml(config, name, home / name / "data", extra=extra)
    if secure:
        allowed = "".join(
            f'<permission type="{kind}" roles="amq"/>'
            for kind in ("createNonDurableQueue", "deleteNonDurableQueue", "consume", "send", "manage")
        )
        settings = (
            f'<security-settings><security-setting match="#">{allowed}</security-setting></security-settings>'
        )
        text = config.read_text().replace("<security-enabled>false<", "<security-enabled>true<")
        config.write_text(text.replace("<acceptors>", f"{settings}<acceptors>"))
        (config.parent / "artemis-users.properties").write_text("admin = secret\n")
        (config.parent / "artemis-roles.properties").write_text("amq = admin\n")
    log = home / f"{name}.log"
    process = installation.start("run", "--config", f"{name}/etc/broker.xml", cwd=home, log=log)
    wait_listening(process, log)
    return port, process, log


def test_a_first_send_no_queue_keeps_is_said_in_the_log_and_in_status(tmp_path: Path) -> None:
    """A plain AMQP client's sends to an address it auto-creates (multicast, as Artemis does) with no
    subscription are dropped: the log says so once with the way out, `status` shows how many."""
    installation = repository_env()
    port, broker, log = _start(installation, tmp_path, "first")
    url = f"amqp://127.0.0.1:{port}"
    try:
        assert send(url, "greetings", [f"hello {i}" for i in range(10)]) == 10  # the client saw Accepted
        wait_until(
            lambda: request(url, "getBrokerStatus", [])["unrouted"]["total"] == 10, 10, "ten counted unrouted"
        )
        status = installation.run("status", "--url", url, cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        assert "UNROUTED: 10 message(s) matched no queue" in status.stdout, status.stdout
        [row] = [line for line in status.stdout.splitlines() if line.startswith("greetings")]
        assert row.split() == ["greetings", "MULTICAST", "10"]
        text = log.read_text()
        lines = [line for line in text.splitlines() if "AMQ951020" in line]
        assert len(lines) == 1, lines  # once for the address (then at most once a minute)
        assert "'greetings'" in lines[0] and "'queue' capability" in lines[0]
    finally:
        assert stop(broker) == 0


def test_status_into_a_pipe_that_closes_is_no_error(tmp_path: Path) -> None:
    installation = repository_env()
    port, broker, _ = _start(installation, tmp_path, "piped")
    try:
        for args in ("", " --watch 1"):
            piped = subprocess.run(
                f"'{installation.command}' status --url amqp://127.0.0.1:{port}{args} | head -1; "
                'exit "${PIPESTATUS[0]}"',
                shell=True,
                executable="/bin/bash",
                capture_output=True,
                text=True,
                timeout=60,
                cwd=tmp_path,
            )
            assert piped.returncode == 0, piped.stderr
            assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr, piped.stderr
            assert piped.stdout.startswith("server piped"), piped.stdout  # no clear-screen escape in a pipe
    finally:
        assert stop(broker) == 0


def test_what_went_wrong_reaching_a_broker_is_said_in_a_sentence(tmp_path: Path) -> None:
    installation = repository_env()
    metrics = free_port()
    extra = (
        '<metrics><plugin class-name="org.amqp_mirror.metrics.PrometheusMetricsPlugin">'
        f'<property key="port" value="{metrics}"/></plugin></metrics>'
    )
    port, broker, _ = _start(installation, tmp_path, "secure", extra=extra, secure=True)
    try:
        cases = [
            (["status", "--url", f"amqp://127.0.0.1:{port}"], "authentication failed: the broker requires a "
             "login: give --user and --password"),
            (["status", "--url", f"amqp://127.0.0.1:{port}", "--user", "admin", "--password", "nope"],
             "authentication failed: the broker refused user 'admin'"),
            (["ha", "status", "--url", f"amqp://127.0.0.1:{free_port()}"],
             "connection refused: is the broker running, and is this its AMQP port?"),
            (["connections", "list", "--url", f"amqp://127.0.0.1:{metrics}"],
             "the other end does not speak AMQP: is this the broker's AMQP port?"),
        ]  # fmt: skip
        for args, says in cases:
            result = installation.run(*args, cwd=tmp_path, timeout=60)
            assert result.returncode == 1, result.stdout + result.stderr
            assert says in result.stderr, (args, result.stderr)
            assert "Traceback" not in result.stderr
        ok = installation.run(
            "status",
            "--url",
            f"amqp://127.0.0.1:{port}",
            "--user",
            "admin",
            "--password",
            "secret",
            cwd=tmp_path,
        )
        assert ok.returncode == 0 and ok.stdout.startswith("server secure"), ok.stderr
    finally:
        assert stop(broker) == 0


def test_ha_status_and_connections_list_print_words(tmp_path: Path) -> None:
    installation = repository_env()
    shared = tmp_path / "shared"
    dead = free_port()
    extra = (
        f"<ha-policy><shared-store><primary/></shared-store></ha-policy>"
        f"<node-manager-lock-directory>{shared}</node-manager-lock-directory>"
        f'<broker-connections><amqp-connection uri="tcp://127.0.0.1:{dead}" name="far" retry-interval="1000">'
        '<sender address-match="orders"/></amqp-connection></broker-connections>'
    )
    port, broker, _ = _start(installation, tmp_path, "pair", extra=extra)
    url = f"amqp://127.0.0.1:{port}"
    try:
        ha = installation.run("ha", "status", "--url", url, cwd=tmp_path)
        assert ha.returncode == 0, ha.stderr
        fields = {line[:21].strip(): line[21:].strip() for line in ha.stdout.splitlines()}  # label, value
        assert fields["policy"] == "shared-store" and fields["role"] == "primary", ha.stdout
        assert "None" not in ha.stdout and "True" not in ha.stdout and "False" not in ha.stdout, ha.stdout
        assert "shared state" in fields, ha.stdout
        listed = installation.run("connections", "list", "--url", url, cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        [row] = [line for line in listed.stdout.splitlines() if line.startswith("far")]
        assert row.split()[2] == "no", row  # CONNECTED: a word
        assert "True" not in listed.stdout and "False" not in listed.stdout
    finally:
        assert stop(broker) == 0
