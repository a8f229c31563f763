"""The `amqp-mirror` command: one parser, one function per subcommand."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib import metadata
from pathlib import Path

from broker_core.config import ConfigError, load_config
from broker_core.config.check import check_config_main, format_problem, print_problems
from broker_core.config.errors import count

DESCRIPTION = """\
An AMQP 1.0 message broker configured with Apache ActiveMQ Artemis's broker.xml, with Artemis's broker
connections and cross-data-centre mirroring, and a DR reconciliation job on Spark."""

EXIT_CODES = """\
exit codes:
  0  done (reconcile: the survivor is in sync)
  1  failed (a broker that could not start or stopped on a fatal error, a command that failed)
  2  bad usage or input (an unknown option, a broker.xml with errors, a path that is not what it should be,
     a DR command without the [spark] extra)
  3  reconcile: the survivor needs a repair (see the report and the printed repair command)
  4  run: an HA pair stopped this server (it stepped down for its primary, or failed over on request):
     start it again to rejoin the pair (the systemd unit does)"""

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
USAGE_ERROR = 2
EXPORT = "a journal directory to Parquet, one row per record (read-only, safe on a live broker's journal)"


class _Help(argparse.RawDescriptionHelpFormatter):
    """Each option's default after its help (where it has one worth saying); descriptions and epilogs
    keep their line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


def version() -> str:
    try:
        return metadata.version("amqp-mirror")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class OneLineFormatter(logging.Formatter):
    """Every log record is one line: control characters in a message (a user name, an address, a link
    name a peer chose) are escaped, so nobody can forge a log line by putting a newline in one. A
    traceback, appended after the message, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


def escape_controls(text: str) -> str:
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _setup_logging(level: str, form: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        from .ops.logs import JsonLinesFormatter

        handler.setFormatter(JsonLinesFormatter())
    else:
        handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler])


def _cmd_run(args: argparse.Namespace) -> int:
    from .runtime import run

    _setup_logging(args.log_level, args.log_format)
    log = logging.getLogger("amqp-mirror")
    try:
        cfg, problems = load_config(args.config, strict=args.strict)
    except ConfigError as exc:  # as check-config prints it, and what did not happen last
        print_problems(exc.problems, sys.stderr)
        errors = [p for p in exc.problems if p.severity == "error"]
        print(f"not started: {count(errors)}", file=sys.stderr)
        return USAGE_ERROR
    for problem in problems:
        log.log(
            logging.INFO if problem.severity == "note" else logging.WARNING, "%s", format_problem(problem)
        )
    if args.data_dir:
        base = Path(args.data_dir).resolve()
        cfg = cfg.model_copy(
            update={
                "journal_directory": base / "journal",
                "bindings_directory": base / "bindings",
                "paging_directory": base / "paging",
                "large_messages_directory": base / "large-messages",
            }
        )
    return run([cfg])


def _cmd_check(args: argparse.Namespace) -> int:
    return USAGE_ERROR if check_config_main(args.file, args.strict) else 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    _setup_logging(args.log_level)
    return demo_main(args.messages)


def _cmd_connections(args: argparse.Namespace) -> int:
    from connections.cli import main as connections_main

    if args.action in ("start", "stop", "forget-remote") and not args.name:
        what = "remote broker's ID" if args.action == "forget-remote" else "connection's NAME"
        print(f"amqp-mirror connections {args.action}: needs the {what}", file=sys.stderr)
        return USAGE_ERROR
    return connections_main(args)


def _cmd_ha(args: argparse.Namespace) -> int:
    """`ha status` and `ha failover` over management; a passive server answers with where the active is.
    `ha sequence` and `ha break-glass` read a stopped server's broker.xml (ha_admin.py)."""
    import json

    if args.action in ("sequence", "break-glass"):
        from .ha_admin import main as admin_main

        if not args.config:
            print(
                f"amqp-mirror ha {args.action}: needs --config, the stopped server's broker.xml",
                file=sys.stderr,
            )
            return USAGE_ERROR
        return admin_main(args.action, args.config, args.node_id)

    from connections.cli import explain, request
    from connections.failover.client import Redirected

    auth = {"user": args.user, "password": args.password}
    try:
        if args.action == "status":
            status = request(args.url, "getHAStatus", [], **auth)
            print(json.dumps(status, sort_keys=True) if args.json else _ha_text(status))
        else:
            request(args.url, "forceFailover", [], **auth)
            print("failover requested: this server stops and its backup takes over")
    except Redirected as exc:
        where = f"{exc.where[0]}:{exc.where[1]}" if exc.where else "unknown"
        if args.action == "status":
            # The passive server names its partner from its configuration: whether that one is really
            # there is asked of the partner itself.
            there = exc.where is not None and _reachable(exc.where[0], exc.where[1])
            if args.json:
                print(json.dumps({"state": "passive", "active": where, "activeReachable": there}))
            elif there:
                print(f"passive; the active server is {where}")
            else:
                print(f"passive; the active server should be {where}, but nothing answers there: the pair "
                      "may have no active server")  # fmt: skip
            return 0
        print(f"error: {args.url} is passive; the active server is {where}", file=sys.stderr)
        return 1
    except Exception as exc:
        print(f"error: {explain(args.url, exc, args.user)}", file=sys.stderr)
        return 1
    return 0


# What `ha status` prints, in this order, when the server says it (a shared-store pair has no replica
# sync, a replicated one no shared-state letter)
_HA_FIELDS = (
    ("policy", "policy"),
    ("role", "role"),
    ("state", "state"),
    ("nodeId", "node id"),
    ("synchronized", "replica in sync"),
    ("activationSequence", "activation sequence"),
    ("coordinatedSequence", "coordinated sequence"),
    ("lockManager", "lock manager"),
    ("sharedState", "shared state"),
    ("backupPresent", "backup present"),
    ("partner", "partner"),
    ("backsUp", "backs up"),  # a colocated backup: the primary it backs up
    ("backupHostedBy", "backup hosted by"),  # a colocated primary: where its backup runs
)


def _reachable(host: str, port: int, timeout: float = 3.0) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _ha_text(status: dict[str, object]) -> str:
    lines = []
    for key, label in _HA_FIELDS:
        value = status.get(key)
        if value is None:
            continue
        shown = ("yes" if value else "no") if isinstance(value, bool) else str(value)
        lines.append(f"{label:21} {shown}")
    for backup in _colocated(status):  # the backups this server's process runs for its cluster
        lines.append(f"{'colocated backup':21} {backup}")
    return "\n".join(lines)


def _colocated(status: dict[str, object]) -> list[str]:
    backups = status.get("colocatedBackups")
    if not isinstance(backups, list):
        return []
    return [
        f"{b['name']} ({b['role']}, {b['state']}) backs up {b['backsUp']} at {b['primaryAt']}"
        for b in backups
    ]


def _cmd_status(args: argparse.Namespace) -> int:
    from .ops.status import main as status_main

    if args.watch is not None and args.watch <= 0:
        print("amqp-mirror status: --watch needs a number of seconds above 0", file=sys.stderr)
        return USAGE_ERROR
    return status_main(args)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="amqp-mirror", description=DESCRIPTION, epilog=EXIT_CODES, formatter_class=_Help
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=summary, description=summary, epilog=EXIT_CODES, formatter_class=_Help
        )

    p = command("run", "run a broker from an Artemis broker.xml (until SIGTERM or SIGINT)")
    p.add_argument("--config", required=True, metavar="FILE", help="the broker.xml to run")
    p.add_argument(
        "--strict",
        action="store_true",
        help="refuse a file with any warning or note too (what has no effect here, a deprecated name, ...)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="the parent of the journal, bindings, paging and large-messages directories, instead of "
        "broker.xml's",
    )
    p.add_argument("--log-level", default="INFO", choices=LOG_LEVELS, type=str.upper, help="log threshold")
    p.add_argument(
        "--log-format",
        default="text",
        choices=("text", "json"),
        help="text lines, or one JSON object a line (time, level, logger, id, message) for log shippers",
    )
    p.set_defaults(func=_cmd_run)

    p = command(
        "check-config",
        "validate a broker.xml: every error, warning and note as file:line, exit 2 on errors",
    )
    p.add_argument("file", help="the broker.xml to check")
    p.add_argument(
        "--strict",
        action="store_true",
        help="count warnings and notes as errors (what has no effect here, a deprecated name, ...)",
    )
    p.set_defaults(func=_cmd_check)

    p = command("demo", "two data centres mirroring each other on this machine, with traffic and a summary")
    p.add_argument("--messages", type=int, default=1000, help="messages sent in each phase")
    p.add_argument("--log-level", default="WARNING", choices=LOG_LEVELS, type=str.upper, help="log threshold")
    p.set_defaults(func=_cmd_demo)

    p = command(
        "connections",
        "list, start or stop a running broker's broker connections, or forget which mirror address and "
        "user a remote broker's mirror links come through (management)",
    )
    p.add_argument("action", choices=["list", "start", "stop", "forget-remote"], help="what to do")
    p.add_argument(
        "name", nargs="?", help="the broker connection to start or stop; the remote broker id to forget"
    )
    p.add_argument("--url", default="amqp://127.0.0.1:5672", help="the broker's AMQP URL")
    p.add_argument("--user", help="a user with the manage permission")
    p.add_argument("--password", help="that user's password")
    p.set_defaults(func=_cmd_connections)

    p = command(
        "ha",
        "the HA role and state of a running broker, or make it fail over to its backup; a stopped replicated "
        "server's activation sequence, or break glass: let it activate with the journal it has",
    )
    p.add_argument(
        "action",
        choices=["status", "failover", "sequence", "break-glass"],
        help="show the state; forceFailover; show the activation sequence (--config); break glass (--config, "
        "--node-id)",
    )
    p.add_argument("--config", metavar="FILE", help="sequence, break-glass: the stopped server's broker.xml")
    p.add_argument(
        "--node-id", help="break-glass: the node id, typed back to say this is meant (`ha sequence` shows it)"
    )
    p.add_argument("--url", default="amqp://127.0.0.1:5672", help="the broker's AMQP URL")
    p.add_argument("--user", help="a user with the manage permission")
    p.add_argument("--password", help="that user's password")
    p.add_argument("--json", action="store_true", help="status as one JSON object")
    p.set_defaults(func=_cmd_ha)

    p = command("status", "a running broker at a glance: HA, acceptors, queues, broker connections, mirrors")
    p.add_argument("--url", default="amqp://127.0.0.1:5672", help="the broker's AMQP URL")
    p.add_argument("--user", help="a user with the manage permission")
    p.add_argument("--password", help="that user's password")
    p.add_argument("--json", action="store_true", help="one JSON object (per refresh with --watch)")
    p.add_argument(
        "--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until interrupted (Ctrl-C)"
    )
    p.set_defaults(func=_cmd_status)

    from . import admin

    admin.add_commands(command)

    from spark_dr import cli as dr_cli  # imports pyspark only when a DR command runs

    p = command("journal", "journal tools (no Spark needed)")
    jsub = p.add_subparsers(dest="journal_command", required=True, metavar="TOOL")
    p = jsub.add_parser(
        "export",
        help=EXPORT,
        description=EXPORT,
        epilog=EXIT_CODES,
        formatter_class=_Help,
    )
    dr_cli.add_export_args(p)
    p.set_defaults(func=dr_cli.export_main)

    p = command(
        "reconcile", "compare two data centres' journals on Spark after a DR failover: report and plan"
    )
    dr_cli.add_reconcile_args(p)
    p.set_defaults(func=dr_cli.reconcile_main)

    p = command("repair", "apply a reconcile repair plan to the surviving broker over AMQP")
    dr_cli.add_repair_args(p)
    p.set_defaults(func=dr_cli.repair_main)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except BrokenPipeError:
        # The reader went away (`amqp-mirror status | head`): not an error of ours. Python would print
        # a traceback while flushing stdout at exit; point stdout at nothing instead.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
