"""The compiled hot path (optional): mypyc builds of the modules that run for every message.

`scripts/compile.py` builds them into `build/mypyc/` beside the packages (`pip install .` and a wheel:
into `broker_core/_mypyc/`, by setup.py), with a stamp naming the
Python they were built for and a hash of each module's source. A package puts that directory in front
of its own `__path__` only if the stamp matches this Python and every source, so an edited module is
never shadowed by an older build: the broker runs as plain Python until the next compile. It is all or
nothing, because compiled modules call each other directly. `AMQP_MIRROR_COMPILED=0` turns it off.

This module is plain Python, imported first by each package; it must not import the rest of the broker.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKOUT = (ROOT / "scripts" / "compile.py").is_file()
# A checkout's build (scripts/compile.py) sits beside the packages; an installed one (pip install ., a
# wheel: setup.py) inside this package, so an installation puts nothing at the top of site-packages.
BUILD = ROOT / "build" / "mypyc" if CHECKOUT else Path(__file__).resolve().parent / "_mypyc"
STAMP = "stamp.json"
SWITCH = "AMQP_MIRROR_COMPILED"
# How to build it, named only where it can be done: a checkout has the script, an installation is rebuilt.
_HOW = " (scripts/compile.py)" if CHECKOUT else ""
SKIPPED = "_mypyc.skipped"  # an installation built without it says why in this file, beside BUILD

# What a message passes through: frames, routing, queues, the journal and its records, mirror source
# and target (and the connection manager: an interpreted class cannot subclass the compiled `Observer`).
MODULES = (
    "broker_core.acceptor",
    "broker_core.amqp.codec",
    "broker_core.amqp.connection",
    "broker_core.amqp.endpoints",
    "broker_core.amqp.framing",
    "broker_core.amqp.sasl",
    "broker_core.amqp.sessions",
    "broker_core.amqp.transfers",
    "broker_core.endpoint",
    "broker_core.histogram",
    "broker_core.events",
    "broker_core.identity",
    "broker_core.inbound_attach",
    "broker_core.inbound_links",
    "broker_core.journal.codec",
    "broker_core.journal.journal",
    "broker_core.journal.records",
    "broker_core.journal.state",
    "broker_core.journal.writer",
    "broker_core.message",
    "broker_core.outcomes",
    "broker_core.paging.pagefile",
    "broker_core.paging.paging",
    "broker_core.paging.reader",
    "broker_core.paging.store",
    "broker_core.persistence",
    "broker_core.queues",
    "broker_core.routing",
    "broker_core.server",
    "broker_core.services",
    "broker_core.stats",
    "broker_core.topology",
    "broker_core.turn",
    "broker_core.usage",
    "broker_core.vocabulary",
    "connections.manager",
    "connections.outbound",
    "connections.queue_links",
    "mirror.decode",
    "mirror.holding",
    "mirror.inbound",
    "mirror.shapes",
    "mirror.source",
    "mirror.target",
    "mirror.wire",
)


def source_path(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digests(root: Path) -> dict[str, str]:
    """The hash of each compiled module's source under `root`."""
    return {m: hashlib.sha256(source_path(root, m).read_bytes()).hexdigest() for m in MODULES}


def stamp_for(root: Path) -> dict[str, object]:
    return {"ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"), "modules": digests(root)}


def why_not(root: Path = ROOT, build: Path = BUILD, env: Mapping[str, str] = os.environ) -> str | None:
    """None when the build under `build` can run the sources under `root`; otherwise why not."""
    if env.get(SWITCH, "1") == "0":
        return f"turned off ({SWITCH}=0)"
    try:
        stamp = json.loads((build / STAMP).read_text())
    except FileNotFoundError:
        try:
            return f"not built: {(build.parent / SKIPPED).read_text().strip()}"
        except OSError:
            return f"not built{_HOW}"
    except (OSError, ValueError) as exc:
        return f"unreadable stamp {build / STAMP}: {exc}"
    if stamp.get("ext_suffix") != sysconfig.get_config_var("EXT_SUFFIX"):
        return f"built for another Python ({stamp.get('ext_suffix')})"
    built = stamp.get("modules")
    if not isinstance(built, dict):
        return f"unreadable stamp {build / STAMP}: no module list"
    try:
        current = digests(root)
    except OSError as exc:  # a source that cannot be read cannot be checked against the build
        return f"cannot read a compiled module's source: {exc}"
    changed = sorted(m for m in MODULES if built.get(m) != current[m])
    if changed:
        return f"stale: {', '.join(changed)} changed since the build{_HOW}"
    return None


class _GroupLibrary(importlib.abc.MetaPathFinder):
    """Finds the build's shared library (mypyc's `<hash>__mypyc`, a top-level module the compiled modules
    import) and nothing else. Putting the build directory on `sys.path` instead would expose its package
    folders too: a process that imports `broker_core` before this module runs (a spawned worker, whose
    `sys.path` is copied from its parent) would take the folder for a namespace package."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if path is not None or not fullname.endswith("__mypyc"):
            return None
        library = BUILD / f"{fullname}{sysconfig.get_config_var('EXT_SUFFIX')}"
        return importlib.util.spec_from_file_location(fullname, library) if library.is_file() else None


REASON = why_not()
IN_USE = REASON is None
if IN_USE and not any(isinstance(finder, _GroupLibrary) for finder in sys.meta_path):
    sys.meta_path.append(_GroupLibrary())


def overlay(package: str, path: list[str]) -> list[str]:
    """`path` (a package's __path__) with the build's directory for that package in front, if in use."""
    if not IN_USE:
        return path
    return [str(BUILD.joinpath(*package.split("."))), *path]


def status() -> str:
    if IN_USE:
        return f"compiled hot path: in use ({len(MODULES)} modules, mypyc)"
    return f"compiled hot path: not in use, {REASON}; running as plain Python"
