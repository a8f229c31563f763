"""What the DR commands are given, checked before any work starts (Spark takes seconds to start, and an
export writes files): the optional packages they need, and whether each input is what it claims.

A problem is one line for the operator, naming the path as it was given; the command exits with 2.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import NoReturn

from .artemis_export import is_export
from .rows import journal_dir

SPARK_EXTRA = "[spark]"  # amqp-mirror is installed from its repository (no package index serves it)
USAGE_ERROR = 2  # the exit code of a command given something it cannot use

# What each command imports beyond the broker's own dependencies.
NEEDS = {
    "journal export": ("pyarrow",),
    "reconcile": ("pyspark", "pyarrow", "xxhash", "pandas", "matplotlib"),
    "repair": (),  # proton only, a dependency of the broker
}


class InputError(Exception):
    """An input the command cannot use; the message is the one line to print."""


def require_extra(command: str) -> None:
    """Exit with one line when the packages of the `[spark]` extra that `command` needs are missing."""
    missing = [m for m in NEEDS[command] if importlib.util.find_spec(m) is None]
    if missing:
        fail(
            f"amqp-mirror {command} needs the [spark] extra, missing here: {', '.join(missing)}; "
            f"install it from the amqp-mirror repository with: pip install '.{SPARK_EXTRA}'"
        )


def fail(line: str) -> NoReturn:
    print(line, file=sys.stderr)
    raise SystemExit(USAGE_ERROR)


def is_parquet_file(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"PAR1"
    except OSError:
        return False


def check_journal(given: str) -> Path:
    """A journal directory, or a broker data directory holding one."""
    path = Path(given)
    if not path.exists():
        raise InputError(f"{given}: no such directory")
    if not path.is_dir():
        raise InputError(f"{given}: not a directory (expected a journal directory, with segment-*.jnl files)")
    if not any(journal_dir(path).glob("*.jnl")):
        raise InputError(
            f"{given}: no journal here (expected segment-*.jnl files in it, or in its journal/ directory)"
        )
    return path


def check_side(given: str) -> Path:
    """A reconciliation input: a journal directory, a Parquet export of one (a file or a directory), or
    an Apache ActiveMQ Artemis journal export (``artemis data exp``, an XML file)."""
    path = Path(given)
    if not path.exists():
        raise InputError(f"{given}: no such file or directory")
    if path.is_file():
        if is_parquet_file(path) or is_export(path):
            return path
        raise InputError(
            f"{given}: neither a Parquet file nor an Artemis export (expected a journal directory, a "
            "Parquet export or the XML of `artemis data exp`)"
        )
    if any(path.glob("*.parquet")) or (path / "_SUCCESS").exists() or any(journal_dir(path).glob("*.jnl")):
        return path
    raise InputError(
        f"{given}: neither a journal (segment-*.jnl files, here or in its journal/ directory) "
        "nor a Parquet export"
    )
