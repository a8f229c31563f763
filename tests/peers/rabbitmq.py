"""A private RabbitMQ 3.10 node with the AMQP 1.0 plugin, on free loopback ports in a temp dir.

Why it is started this way:
- Debian's ``/usr/sbin/rabbitmq-server`` wrapper switches to the ``rabbitmq`` user when run as root,
  which cannot write our temp dir; the real script in ``/usr/lib/rabbitmq/bin`` runs fine as root.
- Each node gets its own ``HOME`` (hence its own Erlang cookie) and its own epmd port
  (``ERL_EPMD_PORT``), so parallel nodes never share a cookie file or a port mapper. That private epmd
  daemonises outside our process group, so ``stop()`` kills it explicitly.
- ``RABBITMQ_CONF_ENV_FILE`` points at an empty file so the machine's ``/etc/rabbitmq`` is ignored.
- Durable queues are declared with ``rabbitmqctl eval`` (works offline, no management plugin); they
  are then addressed as ``/amq/queue/NAME``. Attaching to ``/queue/NAME`` would declare a transient one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.peers.ports import LOOPBACK, answers_amqp, free_port, wait_until
from tests.peers.procs import kill_pid, pids_with_env, start_session, stop_session

_SCRIPT_DIRS = (Path("/usr/lib/rabbitmq/bin"),)


def find_scripts_dir() -> Path | None:
    """Directory holding the unwrapped ``rabbitmq-server`` and ``rabbitmqctl`` scripts, if installed."""
    override = os.environ.get("AMQP_MIRROR_RABBITMQ_BIN")
    candidates = [Path(override)] if override else list(_SCRIPT_DIRS)
    for directory in candidates:
        if (directory / "rabbitmq-server").exists() and (directory / "rabbitmqctl").exists():
            return directory
    return None


def availability() -> tuple[bool, str]:
    """Whether a RabbitMQ node can be started here, and why not."""
    if find_scripts_dir() is None:
        return False, "RabbitMQ is not installed (Debian: apt-get install rabbitmq-server)"
    if shutil.which("epmd") is None:
        return False, "Erlang's epmd is not on PATH"
    return True, ""


@dataclass
class RabbitMQ:
    """A running private node. ``url`` is its AMQP 1.0 listener (the guest user is allowed)."""

    host: str
    port: int
    node_name: str
    workdir: Path
    env: dict[str, str]
    scripts_dir: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """Root of the node's process tree (the launcher script; the Erlang VM is below it)."""
        return self.process.pid

    def ctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl -n NODE ARGS`` against this node and return its stdout."""
        argv = [str(self.scripts_dir / "rabbitmqctl"), "-n", self.node_name, *args]
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def declare_durable_queue(self, name: str) -> str:
        """Declare durable classic queue ``name`` (idempotent); return the AMQP 1.0 address to use."""
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"queue name {name!r}: use letters, digits, '-', '_' and '.' only")
        resource = f'rabbit_misc:r(<<"/">>, queue, <<"{name}">>)'
        self.ctl("eval", f'rabbit_amqqueue:declare({resource}, true, false, [], none, <<"tests">>).')
        return f"/amq/queue/{name}"

    def queue_depth(self, name: str) -> int:
        """Messages ready + unacknowledged in queue ``name`` (raises if it does not exist)."""
        for line in self.ctl("list_queues", "-q", "--no-table-headers", "name", "messages").splitlines():
            queue, _, depth = line.partition("\t")
            if queue == name:
                return int(depth)
        raise KeyError(f"no queue {name!r} on {self.node_name}")

    def stop(self) -> None:
        stop_session(self.process)
        _stop_epmd(self.env)


@contextmanager
def running_rabbitmq(workdir: Path, start_timeout: float = 90.0) -> Iterator[RabbitMQ]:
    """Start a private node under ``workdir``, yield it once AMQP answers, always stop it afterwards."""
    scripts_dir = find_scripts_dir()
    if scripts_dir is None:
        raise RuntimeError(availability()[1])
    port = free_port()
    node_name = f"amqpmirror-{uuid.uuid4().hex[:10]}@localhost"
    env = _node_env(workdir, node_name, port)
    process = start_session([str(scripts_dir / "rabbitmq-server")], workdir / "server.out", env, workdir)
    node = RabbitMQ(LOOPBACK, port, node_name, workdir, env, scripts_dir, process)
    try:
        wait_until(lambda: _ready(node), start_timeout, f"RabbitMQ {node_name} on port {port}")
        yield node
    finally:
        node.stop()


def _ready(node: RabbitMQ) -> bool:
    if node.process.poll() is not None:
        log = (node.workdir / "server.out").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"RabbitMQ exited with {node.process.returncode} during start:\n{log}")
    return answers_amqp(node.host, node.port)


def _node_env(workdir: Path, node_name: str, port: int) -> dict[str, str]:
    home = workdir / "home"
    for sub in ("home", "mnesia", "log"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    (workdir / "enabled_plugins").write_text("[rabbitmq_amqp1_0].\n")
    (workdir / "rabbitmq-env.conf").write_text("")
    (workdir / "rabbitmq.conf").write_text(
        f"listeners.tcp.1 = {LOOPBACK}:{port}\n"
        "loopback_users = none\n"
        # Temp dirs can be on small filesystems; the default 50 MB alarm would block publishers.
        "disk_free_limit.absolute = 1MB\n"
    )
    ctl_port = free_port()
    return {
        **os.environ,
        "HOME": str(home),
        "RABBITMQ_NODENAME": node_name,
        "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(free_port()),
        # The CLI's own distribution ports default to dist port + 10000, which can overflow 65535.
        "RABBITMQ_CTL_DIST_PORT_MIN": str(ctl_port),
        "RABBITMQ_CTL_DIST_PORT_MAX": str(ctl_port + 10),
        "ERL_EPMD_PORT": str(free_port()),
        "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
        "RABBITMQ_LOG_BASE": str(workdir / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
        "RABBITMQ_CONF_ENV_FILE": str(workdir / "rabbitmq-env.conf"),
        "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq.conf"),
        "RABBITMQ_PID_FILE": str(workdir / "rabbitmq.pid"),
        "RABBITMQ_PLUGINS_EXPAND_DIR": str(workdir / "plugins-expand"),
    }


def _stop_epmd(env: dict[str, str]) -> None:
    """Kill the node's private epmd: ``epmd -kill`` first, then by pid if it survived."""
    epmd_port = env["ERL_EPMD_PORT"]
    epmd = shutil.which("epmd")
    if epmd is not None:
        subprocess.run([epmd, "-port", epmd_port, "-kill"], env=env, capture_output=True, timeout=10)
    for pid in pids_with_env("ERL_EPMD_PORT", epmd_port, "epmd"):
        kill_pid(pid)
