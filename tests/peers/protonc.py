"""The Qpid Proton C example broker (and its ``send`` / ``receive`` examples), built from Debian's sources.

Debian ships the examples as source only (``libqpid-proton11-dev-examples``), so we compile them once
into a cache directory keyed by a hash of the sources and compiler flags; a rebuild happens only when
those change. The broker keeps queues in memory, creates them on first use, and settles on receipt.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.peers.ports import LOOPBACK, answers_amqp, free_port, wait_until
from tests.peers.procs import start_session, stop_session

EXAMPLES_PACKAGE = "libqpid-proton11-dev-examples"
PROGRAMS = ("broker", "send", "receive")
REPO_ROOT = Path(__file__).resolve().parents[2]


def default_cache_dir() -> Path:
    """Where built binaries live: ``$AMQP_MIRROR_DEPS_DIR`` or the repo's git-ignored ``.deps/``."""
    return Path(os.environ.get("AMQP_MIRROR_DEPS_DIR", REPO_ROOT / ".deps")) / "proton-c"


def find_examples_dir() -> Path | None:
    """The directory holding ``broker.c``: from ``dpkg -L`` when available, else the usual location."""
    candidates = [Path("/usr/share/proton/examples/c")]
    if shutil.which("dpkg") is not None:
        listing = subprocess.run(["dpkg", "-L", EXAMPLES_PACKAGE], capture_output=True, text=True)
        listed = [Path(p).parent for p in listing.stdout.splitlines() if p.endswith("/c/broker.c")]
        candidates = listed + candidates
    return next((d for d in candidates if (d / "broker.c").exists()), None)


def availability() -> tuple[bool, str]:
    if find_examples_dir() is None:
        return False, f"Proton C examples missing (Debian: apt-get install {EXAMPLES_PACKAGE})"
    for tool in ("gcc", "pkg-config"):
        if shutil.which(tool) is None:
            return False, f"{tool} is not installed"
    flags = subprocess.run(["pkg-config", "--exists", "libqpid-proton"])
    if flags.returncode != 0:
        return False, "libqpid-proton development files missing (apt-get install libqpid-proton11-dev)"
    return True, ""


@dataclass(frozen=True)
class ProtonExamples:
    """Paths of the built programs. ``send HOST PORT ADDRESS COUNT`` / ``receive HOST PORT ADDRESS COUNT``
    exchange small map-bodied messages; useful as a load generator with very little client overhead."""

    broker: Path
    send: Path
    receive: Path


def build_examples(cache_dir: Path | None = None) -> ProtonExamples:
    """Compile the examples if the cache has no build for the current sources and flags."""
    source_dir = find_examples_dir()
    if source_dir is None:
        raise RuntimeError(availability()[1])
    flags = subprocess.run(
        ["pkg-config", "--cflags", "--libs", "libqpid-proton"], capture_output=True, text=True, check=True
    ).stdout.split()
    target = (cache_dir or default_cache_dir()) / _build_key(source_dir, flags)
    if not all((target / name).exists() for name in PROGRAMS):
        _compile_into(target, source_dir, flags)
    return ProtonExamples(*(target / name for name in PROGRAMS))


def _build_key(source_dir: Path, flags: list[str]) -> str:
    digest = hashlib.sha256(" ".join(flags).encode())
    for name in (*PROGRAMS, "thread"):
        suffix = ".h" if name == "thread" else ".c"
        digest.update((source_dir / (name + suffix)).read_bytes())
    return digest.hexdigest()[:16]


def _compile_into(target: Path, source_dir: Path, flags: list[str]) -> None:
    # Build in a sibling temp dir and rename it into place, so concurrent builders never see half a build.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=target.parent))
    try:
        for name in PROGRAMS:
            source = str(source_dir / f"{name}.c")
            argv = ["gcc", "-O2", "-o", str(staging / name), source, *flags, "-lpthread"]
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"building {name}.c failed:\n{done.stderr}")
        try:
            staging.rename(target)
        except OSError:
            if not target.exists():  # lost a race with another builder: theirs is as good as ours
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass
class ProtonBroker:
    host: str
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"amqp://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid


@contextmanager
def running_proton_broker(
    workdir: Path, examples: ProtonExamples | None = None, start_timeout: float = 15.0
) -> Iterator[ProtonBroker]:
    """Run the example broker on a free loopback port; yield once it speaks AMQP; always stop it."""
    examples = examples or build_examples()
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = start_session([str(examples.broker), LOOPBACK, str(port)], workdir / "broker.out", cwd=workdir)
    broker = ProtonBroker(LOOPBACK, port, process)
    try:
        wait_until(lambda: _ready(broker, workdir), start_timeout, f"Proton C broker on port {port}")
        yield broker
    finally:
        stop_session(process, grace=5.0)


def _ready(broker: ProtonBroker, workdir: Path) -> bool:
    if broker.process.poll() is not None:
        log = (workdir / "broker.out").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"Proton C broker exited with {broker.process.returncode}:\n{log}")
    return answers_amqp(broker.host, broker.port)
