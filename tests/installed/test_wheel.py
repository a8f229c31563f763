"""A wheel built from the repository, installed where there is no checkout, runs the compiled hot path;
built without a C compiler, or with AMQP_MIRROR_BUILD_COMPILED=0, it is plain Python, and says so in one
line when built and when the broker starts. The operator's commands run as the installed `amqp-mirror`.

Slow on two cores (mypyc and a C compiler for the compiled wheel, a fresh environment for each wheel
installed): every wheel is built once, and each environment is shared by the module's tests.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.installed import REPO, Installation, broker_xml, clean_env, stop, wait_listening

pytestmark = pytest.mark.timeout(1500)
SKIPPED = "broker_core/_mypyc.skipped"


def build_wheel(out: Path, **env: str) -> tuple[Path, str]:
    """`pip wheel` of the repository into `out`; (the wheel, what the build said)."""
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-v",
            "--disable-pip-version-check",
            "-w",
            str(out),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        env=clean_env(env),
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = out.glob("*.whl")
    return wheel, built.stdout + built.stderr


def install(wheel: Path, home: Path) -> Installation:
    venv.EnvBuilder(with_pip=True).create(home)
    subprocess.run(
        [
            str(home / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-compile",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=900,
        env=clean_env(None),
    )
    return Installation(home / "bin")


def amqp_mirror_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip().startswith("amqp-mirror: ")]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Installation, Path, str]:
    out = tmp_path_factory.mktemp("wheel-compiled")
    wheel, said = build_wheel(out)
    return install(wheel, tmp_path_factory.mktemp("venv-compiled")), wheel, said


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Installation, Path, str]:
    out = tmp_path_factory.mktemp("wheel-plain")
    wheel, said = build_wheel(out, AMQP_MIRROR_BUILD_COMPILED="0")
    return install(wheel, tmp_path_factory.mktemp("venv-plain")), wheel, said


@pytest.fixture
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Installation, str, Path]]:
    installation: Installation = request.getfixturevalue(request.param)[0]
    port = broker_xml(tmp_path / "etc" / "broker.xml", "wheel", tmp_path / "data")
    log = tmp_path / "broker.log"
    process = installation.start("run", "--config", "etc/broker.xml", cwd=tmp_path, log=log)
    try:
        wait_listening(process, log)
        yield installation, f"amqp://127.0.0.1:{port}", log
    finally:
        assert stop(process) == 0, log.read_text()


def test_the_compiled_wheel_is_for_this_platform_and_carries_the_build(
    compiled: tuple[Installation, Path, str],
) -> None:
    _, wheel, said = compiled
    assert "-cp3" in wheel.name and "linux" in wheel.name, wheel.name
    assert amqp_mirror_lines(said) == [
        "amqp-mirror: compiling the hot path with mypyc (a few minutes on two cores) ...",
        "amqp-mirror: the compiled hot path is built",
    ]
    names = zipfile.ZipFile(wheel).namelist()
    assert "broker_core/_mypyc/stamp.json" in names and SKIPPED not in names
    assert any(n.startswith("broker_core/_mypyc/broker_core/queues.") and n.endswith(".so") for n in names)
    tops = {n.split("/")[0] for n in names}
    assert "build" not in tops and "scripts" not in tops and "tests" not in tops


@pytest.mark.parametrize("running", ["compiled"], indirect=True)
def test_the_installed_broker_runs_the_compiled_hot_path(running: tuple[Installation, str, Path]) -> None:
    installation, _, log = running
    assert "compiled hot path: in use" in log.read_text()
    where = subprocess.run(
        [
            str(installation.bin / "python"),
            "-c",
            "import broker_core, broker_core.queues as q; print(broker_core.__file__); print(q.__file__)",
        ],
        capture_output=True,
        text=True,
        env=clean_env(None),
        cwd="/",
    )
    package, queues = where.stdout.split()
    assert str(REPO) not in package and "site-packages" in package  # no checkout in sight
    assert queues.endswith(".so")


@pytest.mark.parametrize("running", ["compiled"], indirect=True)
def test_the_commands_as_installed_with_exact_counts(
    running: tuple[Installation, str, Path], tmp_path: Path
) -> None:
    installation, url, _ = running

    def run(*args: str) -> str:
        result = installation.run(*args, "--url", url, cwd=tmp_path)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return result.stdout

    assert json.loads(run("produce", "orders", "--count", "12", "--property", "k=v", "--json"))["sent"] == 12
    [stat] = json.loads(run("queue", "stat", "orders", "--json"))
    assert (stat["messageCount"], stat["messagesAdded"]) == (12, 12)
    run("queue", "create", "spare")
    assert "5 messages moved to spare" in run("queue", "move", "orders", "--to", "spare", "--count", "5")
    browsed = json.loads(run("browse", "spare", "--count", "2", "--json"))
    assert browsed["messageCount"] == 5 and [m["text"] for m in browsed["messages"]] == [
        "message 1",
        "message 2",
    ]
    assert (
        run("consume", "orders", "--count", "7", "--quiet")
        == "7 messages received from orders and acknowledged\n"
    )
    assert run("queue", "purge", "spare") == "queue spare: 5 messages removed\n"
    listed = {q["name"]: q["messageCount"] for q in json.loads(run("queue", "list", "--json"))}
    assert listed["orders"] == 0 and listed["spare"] == 0


def test_without_a_c_compiler_the_build_says_so_in_one_line(tmp_path: Path) -> None:
    wheel, said = build_wheel(tmp_path, CC="/nonexistent/cc")
    assert amqp_mirror_lines(said) == [
        "amqp-mirror: installing the plain-Python broker: no C compiler (/nonexistent/cc); it runs the same, "
        "slower"
    ]
    assert wheel.name.endswith("-py3-none-any.whl")
    archive = zipfile.ZipFile(wheel)
    assert not any(n.endswith(".so") for n in archive.namelist())
    assert (
        archive.read(SKIPPED).decode() == "no C compiler (/nonexistent/cc) when this installation was built\n"
    )


@pytest.mark.parametrize("running", ["plain"], indirect=True)
def test_with_the_skip_variable_the_broker_runs_plain_and_says_why(
    plain: tuple[Installation, Path, str], running: tuple[Installation, str, Path]
) -> None:
    _, wheel, said = plain
    assert amqp_mirror_lines(said) == [
        "amqp-mirror: installing the plain-Python broker: AMQP_MIRROR_BUILD_COMPILED=0; it runs the same, "
        "slower"
    ]
    installation, url, log = running
    assert (
        "compiled hot path: not in use, not built: AMQP_MIRROR_BUILD_COMPILED=0 when this installation was "
        "built; running as plain Python" in log.read_text()
    )
    result = installation.run("produce", "orders", "--count", "3", "--url", url, cwd=log.parent)
    assert result.stdout.startswith("3 messages sent to orders and accepted")
    assert os.path.basename(str(wheel)).endswith("-py3-none-any.whl")


def test_the_units_documentation_is_installed_with_the_command(
    compiled: tuple[Installation, Path, str],
) -> None:
    """The systemd unit's Documentation= paths, for the documented venv /opt/amqp-mirror/venv, exist in a
    virtual environment the wheel was installed into, as do the pages the README links to."""
    installation, _, _ = compiled
    prefix = installation.bin.parent
    unit = (REPO / "deploy" / "systemd" / "amqp-mirror.service").read_text()
    documented = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("Documentation=")]
    assert documented
    for uri in documented:
        assert uri.startswith("file:///opt/amqp-mirror/venv/")
        assert (prefix / uri.removeprefix("file:///opt/amqp-mirror/venv/")).is_file(), uri
    readme = prefix / "share" / "doc" / "amqp-mirror" / "README.md"
    for link in re.findall(r"\]\(((?:docs|deploy)/[^)#]+)\)", readme.read_text()):
        assert (readme.parent / link).is_file(), link
