"""The console's place in broker.xml: an acceptor with protocols=CONSOLE, off without one."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_core.config import ConfigError, load_config
from broker_core.config.model import BrokerConfig

REPO = Path(__file__).resolve().parents[2]

AMQP = '<acceptor name="amqp">tcp://127.0.0.1:5672?protocols=AMQP</acceptor>'


def _load(tmp_path: Path, acceptors: str) -> tuple[BrokerConfig, list[str]]:
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    path = etc / "broker.xml"
    path.write_text(
        '<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">'
        f"<security-enabled>false</security-enabled><acceptors>{acceptors}</acceptors></core></configuration>"
    )
    config, problems = load_config(path)
    return config, [f"{p.severity}: {p.message}" for p in problems]


def _errors(tmp_path: Path, acceptors: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, acceptors)
    return [p.message for p in caught.value.problems if p.severity == "error"]


def test_without_a_console_acceptor_there_is_no_console(tmp_path: Path) -> None:
    config, problems = _load(tmp_path, AMQP)
    assert config.console is None and problems == []


def test_a_console_acceptor_gives_host_port_tls_and_session_timeout_and_is_not_an_amqp_one(
    tmp_path: Path,
) -> None:
    console = (
        '<acceptor name="web">tcp://0.0.0.0:8161?protocols=CONSOLE;sslEnabled=true;sslCertPath=/etc/c.pem;'
        "sslKeyPath=/etc/k.pem;consoleSessionTimeout=600000</acceptor>"
    )
    config, problems = _load(tmp_path, AMQP + console)
    assert problems == []
    assert [a.name for a in config.acceptors] == ["amqp"]  # the AMQP listener never binds the console's
    assert config.console is not None
    acceptor = config.console.acceptor
    assert (acceptor.name, acceptor.host, acceptor.port) == ("web", "0.0.0.0", 8161)
    assert (
        acceptor.tls.enabled
        and acceptor.tls.cert_path == "/etc/c.pem"
        and acceptor.tls.key_path == "/etc/k.pem"
    )
    assert config.console.session_timeout == 600000


def test_the_default_session_lasts_half_an_hour(tmp_path: Path) -> None:
    config, _ = _load(tmp_path, '<acceptor name="web">tcp://127.0.0.1:8161?protocols=CONSOLE</acceptor>')
    assert config.console is not None and config.console.session_timeout == 30 * 60 * 1000


def test_an_amqp_tuning_on_the_console_and_a_console_timeout_on_amqp_are_said_to_do_nothing(
    tmp_path: Path,
) -> None:
    _, problems = _load(
        tmp_path,
        '<acceptor name="amqp">tcp://127.0.0.1:5672?protocols=AMQP;consoleSessionTimeout=60000</acceptor>'
        '<acceptor name="web">tcp://127.0.0.1:8161?protocols=CONSOLE;amqpCredits=5</acceptor>',
    )
    assert problems == [
        "warning: URI parameter consoleSessionTimeout has no effect on an AMQP acceptor; ignored",
        "warning: URI parameter amqpCredits has no effect on a console acceptor; ignored",
    ]


@pytest.mark.parametrize(
    ("acceptors", "error"),
    [
        (
            '<acceptor name="web">tcp://127.0.0.1:8161?protocols=CONSOLE,AMQP</acceptor>',
            "protocols CONSOLE,AMQP: the console has an acceptor of its own",
        ),
        (
            '<acceptor name="a">tcp://127.0.0.1:8161?protocols=CONSOLE</acceptor>'
            '<acceptor name="b">tcp://127.0.0.1:8162?protocols=CONSOLE</acceptor>',
            "a second console acceptor",
        ),
        (
            '<acceptor name="web">tcp://127.0.0.1:8161?protocols=CONSOLE;sslEnabled=true</acceptor>',
            "sslEnabled=true without a certificate",
        ),
        (
            '<acceptor name="web">tcp://127.0.0.1:8161?protocols=CONSOLE;consoleSessionTimeout=10</acceptor>',
            "URI parameter consoleSessionTimeout: integer 10 out of range",
        ),
        (
            '<acceptor name="web">tcp://127.0.0.1:8161?protocols=CONSOLE;consoleSesionTimeout=1000</acceptor>',
            "unknown URI parameter 'consoleSesionTimeout' (did you mean consoleSessionTimeout?)",
        ),
        (
            AMQP + '<acceptor name="amqp">tcp://127.0.0.1:8161?protocols=CONSOLE</acceptor>',
            "duplicate acceptor name 'amqp'",
        ),
    ],
)
def test_a_console_acceptor_that_cannot_mean_what_it_says_is_an_error(
    tmp_path: Path, acceptors: str, error: str
) -> None:
    errors = _errors(tmp_path, acceptors)
    assert any(e.startswith(error) for e in errors), errors


def test_a_changed_console_is_applied_at_the_next_restart(tmp_path: Path) -> None:
    from amqp_mirror.ops.reload import _restart_needed

    before, _ = _load(tmp_path, '<acceptor name="web">tcp://127.0.0.1:8161?protocols=CONSOLE</acceptor>')
    after, _ = _load(tmp_path, '<acceptor name="web">tcp://127.0.0.1:8162?protocols=CONSOLE</acceptor>')
    assert _restart_needed(before, after) == ["console"]


def test_the_console_s_static_files_are_installed_with_the_package() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert '"amqp_mirror.console" = ["static/*.css", "static/*.js"]' in text
    assert {p.name for p in (REPO / "amqp_mirror" / "console" / "static").iterdir()} == {
        "console.css",
        "console.js",
    }
