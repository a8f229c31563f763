"""The Qpid JMS harness (tests/jms): a small Java program on a real Qpid JMS client (Maven Central),
built once by `scripts/install-deps` into the cache, one jar per version of its sources.

`run(url, "scenarios", prefix)` runs it against a broker and returns its JSON lines. The jar's name
carries a digest of the harness's sources (pom.xml, then every file under src/ in path order), computed
here exactly as install-deps computes it, so an edited harness is never run as an older build.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from tests.peers.artemis import cache_dir, java_command

REPO = Path(__file__).resolve().parents[2]
SOURCES = REPO / "tests" / "jms"


def digest() -> str:
    files = [SOURCES / "pom.xml", *sorted((p for p in (SOURCES / "src").rglob("*") if p.is_file()), key=str)]
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]


def harness_jar() -> Path:
    return cache_dir() / f"jms-harness-{digest()}.jar"


def availability() -> tuple[bool, str]:
    if java_command() is None:
        return False, "Java is not installed (Debian: apt-get install openjdk-17-jre-headless)"
    if not harness_jar().exists():
        return False, f"the Qpid JMS harness is not built ({harness_jar()}: run scripts/install-deps)"
    return True, ""


def run(url: str, command: str, *args: str, timeout: float = 300) -> list[dict[str, Any]]:
    """Run the harness; its JSON lines. A non-zero exit raises with what it printed."""
    java = java_command()
    assert java is not None
    argv = [java, "-Xmx256m", "-jar", str(harness_jar()), url, command, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the JMS harness failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
