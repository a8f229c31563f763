"""The `amqp-mirror` command."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from broker_core.config import ConfigError, load_config
from broker_core.config.check import check_config_main


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from .runtime import run

    _setup_logging(args.log_level)
    log = logging.getLogger("amqp-mirror")
    try:
        cfg, warnings = load_config(args.config, strict=args.strict)
    except ConfigError as exc:
        for p in exc.problems:
            print(str(p), file=sys.stderr)
        return 2
    for w in warnings:
        log.warning("%s", w)
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
    return check_config_main(args.file, args.strict)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import main as demo_main

    _setup_logging(args.log_level)
    return demo_main(args.messages)


def _cmd_connections(args: argparse.Namespace) -> int:
    from connections.cli import main as connections_main

    if args.action in ("start", "stop") and not args.name:
        print(f"connections {args.action} needs a NAME", file=sys.stderr)
        return 2
    return connections_main(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="amqp-mirror", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="run a broker from an Artemis broker.xml")
    p.add_argument("--config", required=True, help="path to broker.xml")
    p.add_argument("--strict", action="store_true", help="treat unimplemented elements as errors")
    p.add_argument("--data-dir", help="override the journal/bindings/paging directories' parent")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("check-config", help="validate a broker.xml and print every problem")
    p.add_argument("file")
    p.add_argument("--strict", action="store_true")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("demo", help="DC1 and DC2 mirroring each other, demo traffic, a summary")
    p.add_argument("--messages", type=int, default=1000)
    p.add_argument("--log-level", default="WARNING")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("connections", help="list, start or stop broker connections over AMQP management")
    p.add_argument("action", choices=["list", "start", "stop"])
    p.add_argument("name", nargs="?")
    p.add_argument("--url", default="amqp://127.0.0.1:5672")
    p.add_argument("--user")
    p.add_argument("--password")
    p.set_defaults(func=_cmd_connections)

    from spark_dr import cli as dr_cli  # imports pyspark only when a DR command runs

    p = sub.add_parser("journal", help="journal tools")
    jsub = p.add_subparsers(dest="journal_command", required=True)
    p = jsub.add_parser("export", help="export a journal directory to Parquet (one row per record)")
    dr_cli.add_export_args(p)
    p.set_defaults(func=dr_cli.export_main)

    p = sub.add_parser("reconcile", help="DR reconciliation of two data centres' journals on Spark")
    dr_cli.add_reconcile_args(p)
    p.set_defaults(func=dr_cli.reconcile_main)

    p = sub.add_parser("repair", help="apply a DR repair plan to the surviving broker over AMQP")
    dr_cli.add_repair_args(p)
    p.set_defaults(func=dr_cli.repair_main)

    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
