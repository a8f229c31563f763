"""What a new user meets in the first hour, through the installed `amqp-mirror` command.

Each test runs the command as a process: from the repository's `.venv` (with the compiled hot path, as
`scripts/test` builds it) and from fresh environments installed with `pip install .` and
`pip install '.[spark]'`, as from a wheel. Nothing is called in-process.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from connections.cli import request
from tests.conftest import in_ci
from tests.peers.ports import free_port, wait_until
from tests.support.client import send
from tests.support.installed import (
    Installation,
    broker_xml,
    fresh_env,
    repository_env,
    stop,
    wait_listening,
)

STOCK = Path(__file__).resolve().parents[1] / "config" / "fixtures" / "stock" / "etc"
pytestmark = pytest.mark.timeout(900)  # the fresh environments are installed by the first test using them


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Installation:
    """`pip install .`: the broker without the [spark] extra."""
    return fresh_env(tmp_path_factory.mktemp("venv-plain"))


@pytest.fixture(scope="module")
def with_spark(tmp_path_factory: pytest.TempPathFactory) -> Installation:
    """`pip install '.[spark]'`."""
    return fresh_env(tmp_path_factory.mktemp("venv-spark"), extras="spark")


@pytest.fixture(scope="module")
def repo() -> Installation:
    """The repository's .venv, whose packages run the compiled hot path when it is built."""
    from broker_core import compiled

    if not compiled.IN_USE:
        message = f"the compiled hot path is not in use: {compiled.REASON}"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return repository_env()


@pytest.fixture(params=["repo", "with_spark"])
def spark_ready(request: pytest.FixtureRequest) -> Installation:
    installation: Installation = request.getfixturevalue(request.param)
    return installation


# ---------------------------------------------------------------------------------- help and habits


def test_help_says_what_it_is_and_every_option_has_help(plain: Installation, tmp_path: Path) -> None:
    top = plain.run("--help", cwd=tmp_path)
    assert top.returncode == 0 and top.stdout.startswith("usage: amqp-mirror")
    assert "AMQP 1.0 message broker configured with Apache ActiveMQ Artemis's broker.xml" in top.stdout
    assert "`" not in top.stdout and "exit codes:" in top.stdout
    assert "3  reconcile: the survivor needs a repair" in top.stdout
    for command in (["run"], ["check-config"], ["demo"], ["connections"], ["journal", "export"],
                    ["reconcile"], ["repair"]):  # fmt: skip
        text = plain.run(*command, "--help", cwd=tmp_path).stdout
        options = re.findall(r"^  (-[-\w]+(?: [A-Z_]+)?)(.*)$", text, flags=re.M)
        unexplained = [o for o, rest in options if not rest.strip() and o != "-h"]
        # an option whose help is on the next line is fine: only one with no text at all is not
        assert all(re.search(rf"^  {re.escape(o)}\n\s{{10,}}\S", text, flags=re.M) for o in unexplained), text
    assert "(default: local[2])" in plain.run("reconcile", "--help", cwd=tmp_path).stdout
    assert plain.run("--version", cwd=tmp_path).stdout.strip() == "amqp-mirror 0.1.0"


def test_a_log_level_that_does_not_exist_is_refused(plain: Installation, tmp_path: Path) -> None:
    bad = plain.run("run", "--config", "broker.xml", "--log-level", "verbose", cwd=tmp_path)
    assert bad.returncode == 2 and "invalid choice: 'VERBOSE'" in bad.stderr


def test_check_config_tells_a_typo_from_a_gap_and_from_what_has_no_effect(
    plain: Installation, tmp_path: Path
) -> None:
    config = tmp_path / "etc" / "broker.xml"
    connection = '<amqp-connection uri="tcp://h:1" name="DC2"><mirorr/></amqp-connection>'
    extra = f"<broker-connections>{connection}</broker-connections><diverts/><jmx-domain>x</jmx-domain>"
    broker_xml(config, "typo", tmp_path / "data", extra=extra)
    checked = plain.run("check-config", "etc/broker.xml", cwd=tmp_path)
    assert checked.returncode == 2, checked.stderr
    assert "unknown element <mirorr> (did you mean <mirror>?)" in checked.stderr
    assert "error: broker.xml:" in checked.stderr and "core/diverts: not implemented yet" in checked.stderr
    assert "note: broker.xml:" in checked.stderr and "core/jmx-domain: has no effect here" in checked.stderr
    assert checked.stdout == "etc/broker.xml: 2 errors, 1 note\n"


# ------------------------------------------------------------------------------ what run refuses


def _refused(installation: Installation, tmp_path: Path, config: str) -> tuple[str, str]:
    """check-config's and run's stderr for a file both refuse: exit 2, no broker, no data written."""
    checked = installation.run("check-config", config, cwd=tmp_path)
    ran = installation.run("run", "--config", config, cwd=tmp_path, timeout=60)
    assert (checked.returncode, ran.returncode) == (2, 2), checked.stderr + ran.stderr
    assert "listening on" not in ran.stderr and "Traceback" not in ran.stderr
    assert not (tmp_path / "data").exists()
    severities = ("error: ", "warning: ", "note: ")
    assert all(line.startswith(severities) for line in checked.stderr.splitlines()), checked.stderr
    *problems, last = ran.stderr.splitlines()
    assert problems == checked.stderr.splitlines()  # run says it as check-config does
    errors = checked.stderr.count("error: ")
    assert last == f"not started: {errors} error{'' if errors == 1 else 's'}"
    assert checked.stdout.startswith(f"{config}: {errors} error")
    return checked.stderr, last


def test_a_misspelt_connection_parameter_is_refused_not_run_in_plaintext(
    plain: Installation, tmp_path: Path
) -> None:
    connection = (
        '<broker-connections><amqp-connection uri="tcp://127.0.0.1:5673?sslEnabeld=true;reconectAttempts=3" '
        'name="dc2"><mirror/></amqp-connection></broker-connections>'
    )
    broker_xml(tmp_path / "etc" / "broker.xml", "dc1", tmp_path / "data", extra=connection)
    said, last = _refused(plain, tmp_path, "etc/broker.xml")
    text = (tmp_path / "etc" / "broker.xml").read_text().splitlines()
    line = next(i for i, t in enumerate(text, start=1) if "sslEnabeld" in t)
    where = f"broker.xml:{line}: core/broker-connections/amqp-connection[@name=dc2]/@uri: "
    assert f"error: {where}unknown URI parameter 'sslEnabeld' (did you mean sslEnabled?)" in said
    assert f"error: {where}unknown URI parameter 'reconectAttempts' (did you mean reconnectAttempts?)" in said
    assert last == "not started: 2 errors"


def test_what_would_change_meaning_is_refused_one_error_each_on_its_line(
    plain: Installation, tmp_path: Path
) -> None:
    changes = {
        "store": "<store><database-store><jdbc-user>u</jdbc-user></database-store></store>",
        "graceful-shutdown-enabled": "<graceful-shutdown-enabled>true</graceful-shutdown-enabled>",
        "diverts": '<diverts><divert name="copy"><address>a</address>'
        "<forwarding-address>b</forwarding-address></divert></diverts>",
        "connection-routers": '<connection-routers><connection-router name="r"><key-type>CLIENT_ID</key-type>'
        "</connection-router></connection-routers>",
        "redelivery-delay": '<address-settings><address-setting match="#">'
        "<redelivery-delay>5000</redelivery-delay></address-setting></address-settings>",
    }
    broker_xml(tmp_path / "etc" / "broker.xml", "dc1", tmp_path / "data", extra="\n  ".join(changes.values()))
    said, last = _refused(plain, tmp_path, "etc/broker.xml")
    text = (tmp_path / "etc" / "broker.xml").read_text().splitlines()
    errors = [line for line in said.splitlines() if line.startswith("error: ")]
    assert len(errors) == len(changes) and last == f"not started: {len(changes)} errors", said
    for name, snippet in changes.items():
        line = next(i for i, t in enumerate(text, start=1) if snippet in t)
        [error] = [e for e in errors if f"/{name}: not implemented yet: " in e or f"/{name}/" in e]
        assert error.startswith(f"error: broker.xml:{line}: "), (name, error)


def test_the_broker_xml_artemis_create_writes_runs_saying_what_it_skips(
    plain: Installation, tmp_path: Path
) -> None:
    """Artemis 2.40's own `artemis create` file (its users file with plain passwords), on free ports."""
    etc = tmp_path / "etc"
    shutil.copytree(STOCK, etc)
    checked = plain.run("check-config", "etc/broker.xml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == "etc/broker.xml: 0 errors, 4 warnings, 23 notes\n"
    assert "warning: broker.xml:174: core/acceptors/acceptor[@name=stomp]: protocols STOMP not supported; " \
        "acceptor skipped" in checked.stderr  # fmt: skip
    assert "note: broker.xml:168: core/acceptors/acceptor[@name=artemis]: URI parameter useEpoll has no " \
        "effect here" in checked.stderr  # fmt: skip
    ports = {61616: free_port(), 5672: free_port()}
    text = (etc / "broker.xml").read_text()
    for artemis_port, port in ports.items():
        text = text.replace(f"tcp://0.0.0.0:{artemis_port}?", f"tcp://127.0.0.1:{port}?")
    (etc / "broker.xml").write_text(text)
    log = tmp_path / "stock.log"
    broker = plain.start("run", "--config", "etc/broker.xml", cwd=tmp_path, log=log)
    try:
        wait_listening(broker, log)
        said = log.read_text()
        for line in checked.stderr.splitlines():  # each said once, as check-config says it
            assert said.count(line) == 1, line
        assert send(f"amqp://127.0.0.1:{ports[5672]}", "orders", ["m"], user="admin", password="admin") == 1
    finally:
        assert stop(broker) == 0
    assert (tmp_path / "data" / "journal").is_dir()  # resolved against the instance, as Artemis does


# ------------------------------------------------------------------------------------ the broker


def test_a_second_broker_on_a_data_directory_in_use_is_refused(repo: Installation, tmp_path: Path) -> None:
    data = tmp_path / "data"
    first_port = broker_xml(tmp_path / "a" / "etc" / "broker.xml", "a", data)
    broker_xml(tmp_path / "b" / "etc" / "broker.xml", "b", data)  # a copy with a new port, the old directory
    first = repo.start("run", "--config", "a/etc/broker.xml", cwd=tmp_path, log=tmp_path / "a.log")
    try:
        wait_listening(first, tmp_path / "a.log")
        second = repo.run("run", "--config", "b/etc/broker.xml", cwd=tmp_path, timeout=60)
        assert second.returncode == 1, second.stderr
        refusal = second.stderr
        assert f"is in use: process {first.pid} on " in refusal and f"{data}/journal/serverlock.1" in refusal
        assert "Traceback" not in refusal
        assert send(f"amqp://127.0.0.1:{first_port}", "orders", ["still served"]) == 1
    finally:
        assert stop(first) == 0
    again = repo.start("run", "--config", "b/etc/broker.xml", cwd=tmp_path, log=tmp_path / "b.log")
    try:
        wait_listening(again, tmp_path / "b.log")  # free once the first one stopped
    finally:
        assert stop(again) == 0


def test_a_retrying_broker_connection_says_so_once_then_sparsely(repo: Installation, tmp_path: Path) -> None:
    dead = free_port()
    connection = (
        f'<broker-connections><amqp-connection uri="tcp://127.0.0.1:{dead}" name="far" retry-interval="100">'
        '<sender address-match="orders"/></amqp-connection></broker-connections>'
    )
    port = broker_xml(tmp_path / "etc" / "broker.xml", "near", tmp_path / "data", extra=connection)
    log = tmp_path / "near.log"
    broker = repo.start("run", "--config", "etc/broker.xml", cwd=tmp_path, log=log)
    try:
        wait_listening(broker, log)

        def retries() -> int:
            [far] = json.loads(request(f"amqp://127.0.0.1:{port}", "listBrokerConnections", []))
            return int(far["retries"])

        wait_until(lambda: retries() >= 15, 30, "fifteen attempts")
        text = log.read_text()
        assert text.count("AMQ111002") == 1 and text.count("cannot connect to") == 1, text
    finally:
        stop(broker)


def test_the_demo_runs_from_a_wheel(plain: Installation, tmp_path: Path) -> None:
    demo = plain.run("demo", "--messages", "50", cwd=tmp_path, timeout=180)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "identical, byte for byte" in demo.stdout and "nothing pending" in demo.stdout


def test_a_wheel_never_names_a_repository_script(plain: Installation, tmp_path: Path) -> None:
    port = broker_xml(tmp_path / "etc" / "broker.xml", "wheel", tmp_path / "data")
    log = tmp_path / "wheel.log"
    broker = plain.start("run", "--config", "etc/broker.xml", cwd=tmp_path, log=log)
    try:
        wait_listening(broker, log)
        assert send(f"amqp://127.0.0.1:{port}", "orders", ["m"]) == 1
    finally:
        assert stop(broker) == 0
    text = log.read_text()
    # this environment was installed with the compile skipped (AMQP_MIRROR_BUILD_COMPILED=0): it says so
    assert "compiled hot path: not in use, not built: AMQP_MIRROR_BUILD_COMPILED=0" in text, text
    assert "scripts/" not in text


# ------------------------------------------------------------------------------------- DR tools


def test_dr_commands_without_the_spark_extra_say_what_to_install(plain: Installation, tmp_path: Path) -> None:
    for command in (["journal", "export", "data", "out.parquet"], ["reconcile", "a", "b"]):
        result = plain.run(*command, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        [line] = result.stderr.strip().splitlines()
        assert "needs the [spark] extra" in line and "pip install '.[spark]'" in line, line
    assert list(tmp_path.iterdir()) == []


def test_reconcile_refuses_what_is_not_a_journal_before_starting_spark(
    spark_ready: Installation, tmp_path: Path
) -> None:
    (tmp_path / "empty1").mkdir()
    (tmp_path / "notes.txt").write_text("not parquet")
    for sides, says in (
        (("empty1", "empty1"), "empty1: neither a journal"),
        (("missing", "empty1"), "missing: no such file or directory"),
        (("notes.txt", "empty1"), "notes.txt: neither a Parquet file nor an Artemis export"),
    ):
        result = spark_ready.run("reconcile", *sides, cwd=tmp_path, timeout=60)
        assert result.returncode == 2, result.stdout + result.stderr
        [line] = result.stderr.strip().splitlines()
        assert says in line and "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty1", "notes.txt"]  # nothing written
    missing = spark_ready.run(
        "repair", "--plan", "nowhere.json", "--broker", "amqp://127.0.0.1:1", cwd=tmp_path
    )
    assert (
        missing.returncode == 2
        and missing.stderr.strip() == "amqp-mirror repair: --plan nowhere.json: no such file"
    )


@pytest.fixture(scope="module")
def journals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two data centres' data directories, written by installed brokers: DC1 took three orders, DC2 one."""
    home = tmp_path_factory.mktemp("journals")
    installation = repository_env()
    for name, bodies in (("dc1", ["a", "b", "c"]), ("dc2", ["x"])):
        port = broker_xml(home / name / "etc" / "broker.xml", name, home / name / "data")
        log = home / f"{name}.log"
        broker = installation.start("run", "--config", f"{name}/etc/broker.xml", cwd=home, log=log)
        try:
            wait_listening(broker, log)
            assert send(f"amqp://127.0.0.1:{port}", "orders", bodies) == len(bodies)
        finally:
            assert stop(broker) == 0
    yield home


def test_export_reconcile_and_repair_as_installed(
    spark_ready: Installation, journals: Path, tmp_path: Path
) -> None:
    dc1, dc2 = journals / "dc1" / "data", journals / "dc2" / "data"
    exported = spark_ready.run("journal", "export", str(dc1), "dc1.parquet", "--quiet", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["records"] > 0 and (tmp_path / "dc1.parquet").stat().st_size > 0
    out, plan = tmp_path / "report", tmp_path / "plan.json"
    reconciled = spark_ready.run(
        "reconcile", str(dc1), str(dc2), "--out", str(out), "--plan", str(plan), cwd=tmp_path, timeout=300
    )
    # the two brokers run no mirror: DC1's orders were never carried to DC2, not a divergence
    assert reconciled.returncode == 0, reconciled.stdout + reconciled.stderr
    assert "not mirrored: 3 live on DC1 only" in reconciled.stdout, reconciled.stdout
    assert "Traceback" not in reconciled.stderr
    assert plan.exists() and any(out.glob("*.html"))
    port = broker_xml(tmp_path / "survivor" / "etc" / "broker.xml", "dc2", dc2)
    log = tmp_path / "survivor.log"
    survivor = spark_ready.start("run", "--config", "survivor/etc/broker.xml", cwd=tmp_path, log=log)
    try:
        wait_listening(survivor, log)
        repair = ("repair", "--plan", str(plan), "--broker", f"amqp://127.0.0.1:{port}", "--dry-run")
        alone = spark_ready.run(*repair, cwd=tmp_path)
        assert alone.returncode == 0, alone.stdout + alone.stderr
        assert json.loads(alone.stdout.strip().splitlines()[-1])["would_resend"] == 0  # nothing diverged
        dry = spark_ready.run(*repair, "--not-mirrored", cwd=tmp_path)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        outcome = json.loads(dry.stdout.strip().splitlines()[-1])
        assert outcome["dry_run"] is True and outcome["would_resend"] == 3, outcome  # DC1's three orders
        # said once for people (stderr) and once for scripts (stdout), never as a Python dict
        assert "repair (dry run) done: would re-send 3 (0 already there)" in dry.stderr, dry.stderr
        assert "{'" not in dry.stderr
    finally:
        assert stop(survivor) == 0
