"""The `amqp-mirror` command line: `check-config` and `run` against good and bad configs, and one with
what has no effect here (a note, refused under --strict). A refused file reads the same either way: a
severity on every line, then a count (`run`: "not started: N errors")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from broker_core.amqp.performatives import SaslOutcome
from tests.peers.ports import LOOPBACK
from tests.support.broker import REPO, BrokerProcess
from tests.support.client import send
from tests.support.raw_amqp import RawPeer

INERT = "<jmx-management-enabled>true</jmx-management-enabled>"  # no effect here: a note
SEVERITIES = ("error: ", "warning: ", "note: ")

# Line numbers matter here: each bad element is on a known line (1-based, the XML declaration is 1).
BAD_XML = """<?xml version="1.0"?>
<configuration xmlns="urn:activemq">
  <core xmlns="urn:activemq:core">
    <persistence-enabled>maybe</persistence-enabled>
    <journal-file-size>-5</journal-file-size>
    <acceptors>
      <acceptor name="amqp">tcp://127.0.0.1:notaport?protocols=AMQP</acceptor>
    </acceptors>
  </core>
</configuration>
"""
BAD_LINES = {4: "persistence-enabled", 5: "journal-file-size", 7: "acceptor"}


def _cli(cwd: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [sys.executable, "-m", "amqp_mirror", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _problem_lines(output: str, file_name: str) -> dict[int, str]:
    """`file:line: ...` problem lines by line number."""
    found: dict[int, str] = {}
    for text in output.splitlines():
        match = re.search(rf"\b{re.escape(file_name)}:(\d+): (.*)", text)
        if match:
            found[int(match.group(1))] = match.group(2)
    return found


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), start=1) if needle in line)


@pytest.fixture
def good_config(tmp_path: Path) -> Path:
    return BrokerProcess(tmp_path / "good").write_config()


@pytest.fixture
def bad_config(tmp_path: Path) -> Path:
    path = tmp_path / "bad" / "etc" / "broker.xml"
    path.parent.mkdir(parents=True)
    path.write_text(BAD_XML)
    return path


@pytest.fixture
def noted_config(tmp_path: Path) -> tuple[BrokerProcess, int]:
    """A broker whose config has an element with no effect here, and that element's line."""
    broker = BrokerProcess(tmp_path / "noted", xml_kwargs={"extra": INERT})
    broker.write_config()
    return broker, _line_of(broker.config_path.read_text(), "<jmx-management-enabled>")


# -------------------------------------------------------------------------------------- check-config


def test_check_config_accepts_a_good_file(good_config: Path) -> None:
    result = _cli(good_config.parent, "check-config", str(good_config))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{good_config}: 0 errors\n"
    assert _problem_lines(result.stderr, "broker.xml") == {}


def test_check_config_lists_every_problem_with_its_line(bad_config: Path) -> None:
    result = _cli(bad_config.parent, "check-config", str(bad_config))
    assert result.returncode != 0
    problems = _problem_lines(result.stderr, "broker.xml")
    assert set(problems) == set(BAD_LINES), result.stderr
    for line, element in BAD_LINES.items():
        assert element in problems[line]
    assert all(line.startswith(SEVERITIES) for line in result.stderr.splitlines()), result.stderr
    assert result.stdout == f"{bad_config}: 3 errors, 2 warnings\n"  # no users file, no roles file
    assert "Traceback" not in result.stderr


def test_check_config_reports_malformed_xml_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.xml"
    path.write_text('<?xml version="1.0"?>\n<configuration>\n  <core>\n  </cor>\n</configuration>\n')
    result = _cli(tmp_path, "check-config", str(path))
    assert result.returncode != 0
    assert 4 in _problem_lines(result.stderr, "broken.xml"), result.stderr


def test_check_config_on_a_missing_file_fails_without_a_traceback(tmp_path: Path) -> None:
    result = _cli(tmp_path, "check-config", str(tmp_path / "absent.xml"))
    assert result.returncode != 0
    assert "absent.xml" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_config_notes_what_has_no_effect_here_and_strict_refuses(
    noted_config: tuple[BrokerProcess, int],
) -> None:
    broker, line = noted_config
    relaxed = _cli(broker.home, "check-config", str(broker.config_path))
    assert relaxed.returncode == 0, relaxed.stderr
    assert "jmx-management-enabled" in _problem_lines(relaxed.stderr, "broker.xml").get(line, ""), (
        relaxed.stderr
    )
    assert relaxed.stderr.startswith(
        f"note: broker.xml:{line}: core/jmx-management-enabled: has no effect here"
    )
    assert relaxed.stdout.endswith(": 0 errors, 1 note\n")

    strict = _cli(broker.home, "check-config", "--strict", str(broker.config_path))
    assert strict.returncode == 2
    assert "jmx-management-enabled" in _problem_lines(strict.stderr, "broker.xml").get(line, ""), (
        strict.stderr
    )
    assert strict.stderr.startswith(f"error: broker.xml:{line}: ") and strict.stdout.endswith(": 1 error\n")


def test_strict_refusal_does_not_say_ignored(noted_config: tuple[BrokerProcess, int]) -> None:
    broker, line = noted_config
    strict = _cli(broker.home, "check-config", "--strict", str(broker.config_path))
    assert "ignored" not in _problem_lines(strict.stderr, "broker.xml")[line]


# ----------------------------------------------------------------------------------------------- run


def test_run_with_a_bad_config_exits_non_zero_with_the_problems(bad_config: Path) -> None:
    home = bad_config.parent.parent
    result = _cli(home, "run", "--config", str(bad_config))
    assert result.returncode == 2
    output = result.stdout + result.stderr
    assert set(_problem_lines(output, "broker.xml")) == set(BAD_LINES), output
    *problems, last = result.stderr.splitlines()
    assert all(line.startswith(SEVERITIES) for line in problems), output  # as check-config says it
    assert last == "not started: 3 errors"
    assert "listening on" not in output
    assert "Traceback" not in output
    assert not (home / "data").exists()  # refused before touching the journal


def test_run_logs_what_has_no_effect_here_with_its_line_and_serves(
    noted_config: tuple[BrokerProcess, int],
) -> None:
    broker, line = noted_config
    broker.start()
    try:
        log = broker.log()
        note = _problem_lines(log, "broker.xml").get(line, "")
        assert "jmx-management-enabled" in note, log
        assert re.search(
            rf"INFO .*note: broker\.xml:{line}: core/jmx-management-enabled: has no effect", log
        ), log
        assert send(broker.url, "cli.check", ["served"]) == 1
    finally:
        assert broker.stop() == 0


def test_run_strict_refuses_what_has_no_effect_here(noted_config: tuple[BrokerProcess, int]) -> None:
    broker, line = noted_config
    result = _cli(broker.home, "run", "--strict", "--config", str(broker.config_path))
    assert result.returncode == 2
    output = result.stdout + result.stderr
    assert "jmx-management-enabled" in _problem_lines(output, "broker.xml").get(line, ""), output
    assert result.stderr.splitlines()[-1] == "not started: 1 error"
    assert "listening on" not in output


def test_the_harness_config_is_clean_even_under_strict(tmp_path: Path) -> None:
    """The broker.xml every integration test runs with has no problem at all (no warning or note either)."""
    broker = BrokerProcess(tmp_path / "plain", xml_kwargs={"security": True})
    broker.write_config()
    result = _cli(tmp_path, "check-config", "--strict", str(broker.config_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(": 0 errors\n")


# ------------------------------------------------------------------------------------ users and roles

USERS_WITH_EMPTY_PASSWORDS = "admin = secret\nalice\nbob =\n"


def test_empty_passwords_are_reported_by_check_config_and_run_and_cannot_log_in(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "users", xml_kwargs={"security": True})
    broker.write_config()
    (broker.home / "etc" / "artemis-users.properties").write_text(USERS_WITH_EMPTY_PASSWORDS)
    checked = _cli(broker.home, "check-config", str(broker.config_path))
    assert checked.returncode == 0, checked.stderr
    problems = _problem_lines(checked.stderr, "artemis-users.properties")
    assert problems == {
        2: "alice: no '=': read as a user with an empty password, and an empty password cannot log in; "
        "expected alice = <password>",
        3: "bob: empty password: an empty password cannot log in; expected bob = <password>",
    }, checked.stderr
    assert "warning: artemis-users.properties:2: alice" in checked.stderr
    assert checked.stdout.endswith(": 0 errors, 2 warnings\n"), checked.stdout

    broker.start()
    try:
        assert set(_problem_lines(broker.log(), "artemis-users.properties")) == {2, 3}, broker.log()
        for user in ("alice", "bob"):  # SASL PLAIN with the empty password, on the wire
            with RawPeer(LOOPBACK, broker.port) as peer:
                peer.sasl_init("PLAIN", f"\0{user}\0".encode())
                assert peer.wait_for(SaslOutcome).code == 1, user
        assert send(broker.url, "cli.check", ["served"], user="admin", password="secret") == 1
    finally:
        assert broker.stop() == 0


def test_security_on_without_a_roles_file_is_reported(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "roles", xml_kwargs={"security": True})
    broker.write_config()
    (broker.home / "etc" / "artemis-roles.properties").unlink()
    checked = _cli(broker.home, "check-config", str(broker.config_path))
    assert checked.returncode == 0, checked.stderr
    assert (
        "warning: artemis-roles.properties: security is enabled but there is no roles file: every user is "
        "denied every permission" in checked.stderr
    ), checked.stderr
    assert checked.stdout.endswith(": 0 errors, 1 warning\n"), checked.stdout
