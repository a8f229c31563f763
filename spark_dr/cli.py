"""Entry points of the DR tools, taking argparse namespaces (``amqp-mirror journal export|reconcile|repair``).

``add_export_args``, ``add_reconcile_args`` and ``add_repair_args`` define each command's options, so the
broker's CLI and ``spark_dr/job.py`` (spark-submit) build the same parsers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .artemis_export import ExportError, is_export
from .inputs import InputError, check_journal, check_side, fail, require_extra
from .progress import Heartbeat, Progress

FAILED = 1  # the exit code of a command that could not do all of its work


def add_export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "directory", help="a journal directory (or a broker data directory), or an Artemis export (XML)"
    )
    p.add_argument("out", help="the Parquet file to write")
    p.add_argument("--node-id", help="the node id of the Artemis broker whose export it is (then required)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def add_reconcile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dc1", help="DC1's journal directory, Parquet export or Artemis export (XML)")
    p.add_argument("dc2", help="DC2's journal directory, Parquet export or Artemis export (XML)")
    p.add_argument("--names", default="DC1,DC2", help="the two sides' names, comma-separated")
    p.add_argument("--survivor", help="the side a repair writes to (default: the second name)")
    p.add_argument("--out", default="dr-report", help="directory for the reports, the plan and Spark's log")
    p.add_argument(
        "--no-export",
        action="store_true",
        help="read journal directories through the Spark data source (in the executors, twice) instead "
        "of exporting each to Parquet under OUT/parquet first (once, in parallel processes here)",
    )
    p.add_argument(
        "--node-id",
        action="append",
        metavar="NAME=ID",
        help="the node id of a side given as an Artemis export (`artemis data exp` does not write it; "
        "Artemis logs it at start, AMQ221001 ... nodeID=ID); default: the one origin the other side's "
        "mirror received from",
    )
    p.add_argument("--plan", help="where to write the repair plan (default: OUT/repair-plan.json)")
    p.add_argument("--broker", help="the survivor's AMQP URL, for the repair command the report prints")
    p.add_argument("--master", default="local[2]", help="the Spark master URL")
    p.add_argument(
        "--conf",
        action="append",
        metavar="KEY=VALUE",
        help="a Spark setting for the session (repeatable), e.g. spark.executor.memory=4g",
    )
    p.add_argument("--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions")
    p.add_argument(
        "--plan-limit", type=int, default=1_000_000, help="at most this many actions in the repair plan"
    )
    p.add_argument("--metrics-file", help="write the Pushgateway text exposition here")
    p.add_argument("--pushgateway", help="Pushgateway base URL to PUT the metrics to")
    p.add_argument(
        "--heartbeat",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="a progress line after this many seconds without one (with the Spark jobs' tasks)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def add_repair_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", required=True, help="the plan written by reconcile (OUT/repair-plan.json)")
    p.add_argument("--broker", required=True, help="the surviving broker's AMQP URL")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    p.add_argument(
        "--journal",
        action="append",
        metavar="NAME=DIR",
        help="where a side's journal is on this machine (default: the path in the plan)",
    )
    p.add_argument(
        "--not-mirrored",
        action="store_true",
        help="also re-send the failed side's messages the mirror does not carry (an address its "
        "address-filter excludes, a message from before the mirror: the plan's not_mirrored)",
    )
    p.add_argument("--user", help="a user allowed to send to and consume from the plan's queues")
    p.add_argument("--password", help="that user's password")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each broker answer")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def export_main(args: argparse.Namespace) -> int:
    require_extra("journal export")
    node = getattr(args, "node_id", None)
    try:
        if is_export(Path(args.directory)):
            if not node:
                raise InputError(f"{args.directory}: an Artemis export: give its broker's --node-id")
            directory = Path(args.directory)
        else:
            directory, node = check_journal(args.directory), None
    except InputError as exc:
        fail(f"amqp-mirror journal export: {exc}")
    from .export import export_journal

    say = Progress(args.quiet).throttled(2.0)
    try:
        stats = export_journal(directory, Path(args.out), progress=say, artemis_node=node)
    except ExportError as exc:
        fail(f"amqp-mirror journal export: {exc}")
    print(json.dumps(stats))
    return 0


def reconcile_main(args: argparse.Namespace, spark: Any = None) -> int:
    require_extra("reconcile")
    names = tuple(n.strip() for n in args.names.split(","))
    if len(names) != 2 or not all(names):
        fail(f"amqp-mirror reconcile: --names {args.names!r}: expected two comma-separated names")
    try:  # before Spark starts and anything is written
        inputs = [check_side(args.dc1), check_side(args.dc2)]
        conf = parse_conf(getattr(args, "conf", None))
        node_ids = parse_node_ids(getattr(args, "node_id", None), names)
    except InputError as exc:
        fail(f"amqp-mirror reconcile: {exc}")
    from .outputs import write_reports
    from .plan import build_plan, write_plan
    from .pushgateway import write_and_push
    from .reconcile import NodeIdUnknown, Options, PlanLimitExceeded, reconcile
    from .report import console_summary

    say = Progress(args.quiet)
    out = Path(args.out)
    opts = Options(names=(names[0], names[1]), survivor=args.survivor or names[1], progress=say)
    opts.plan_limit, opts.node_ids, opts.work_dir = args.plan_limit, node_ids, out / "parquet"
    if not args.no_export:
        opts.export_dir = out / "parquet"
    with Heartbeat(say, getattr(args, "heartbeat", 3.0)) as heartbeat:
        try:
            spark, exports, timing = _start(spark, inputs, opts, args, conf, out, say)
        except (NodeIdUnknown, ExportError) as exc:
            fail(f"amqp-mirror reconcile: {exc}")
        heartbeat.spark = spark
        try:
            result = reconcile(spark, inputs[0], inputs[1], opts, exports)
        except PlanLimitExceeded as exc:
            print(f"amqp-mirror reconcile: {exc}", file=sys.stderr)
            return FAILED
    plan = build_plan(result)
    plan_path = Path(args.plan) if args.plan else out / "repair-plan.json"
    result["repair"] = _repair_summary(plan, plan_path, getattr(args, "broker", None), result)
    result["timing"] = {**timing, "reconcile_s": result["seconds"], "wall_s": round(say.elapsed(), 1)}
    write_plan(plan, plan_path)
    paths = write_reports(result, out)
    if args.metrics_file or args.pushgateway:
        metrics_file = Path(args.metrics_file) if args.metrics_file else None
        write_and_push(result, metrics_file, args.pushgateway, pair="-".join(names))
        say("metrics written" + (f" and pushed to {args.pushgateway}" if args.pushgateway else ""))
    print(console_summary(result))
    print(f"  reports: {', '.join(str(p) for p in paths.values())}; repair plan: {plan_path}")
    return 0 if result["survivor_in_sync"] else 3


def _start(
    spark: Any, inputs: list[Path], opts: Any, args: argparse.Namespace, conf: dict[str, str], out: Path,
    say: Progress,
) -> tuple[Any, list[Path | None], dict[str, float]]:  # fmt: skip
    """Spark started while the journals are exported (in processes of their own, running before Spark
    starts): the session, the exports, and how long each took."""
    from .reconcile import start_export_sides
    from .session import spark_session

    timing = {"spark_start_s": 0.0, "export_s": 0.0}
    finish_exports = start_export_sides(inputs, opts)
    if spark is None:
        started = say.elapsed()
        log = out / "spark.log"
        say(f"starting Spark ({args.master or 'from spark-submit'}; its own log: {log})")
        spark = spark_session(args.master, args.shuffle_partitions, log_file=log, conf=conf)
        timing["spark_start_s"] = round(say.elapsed() - started, 1)
    exports, seconds = finish_exports()
    timing["export_s"] = round(seconds, 1)
    return spark, exports, timing


def _repair_summary(
    plan: dict[str, Any], plan_path: Path, broker: str | None, result: dict[str, Any]
) -> dict[str, Any]:
    from .report import repair_command

    return {
        "plan": str(plan_path),
        "command": repair_command(plan_path, broker, result),
        "queues": plan["queues"],
        "resend": len(plan["resend"]),
        "remove": len(plan["remove"]),
        "duplicates_expected": len(plan["duplicates_expected"]),
        "needs_decision": len(plan["needs_decision"]),
        "not_mirrored": len(plan["not_mirrored"]),
    }


def parse_conf(values: list[str] | None) -> dict[str, str]:
    out = {}
    for value in values or []:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--conf {value!r}: expected KEY=VALUE")
        out[key.strip()] = setting
    return out


def parse_node_ids(values: list[str] | None, names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for value in values or []:
        name, sep, node = value.partition("=")
        if not sep or name.strip() not in names or not node.strip():
            raise InputError(f"--node-id {value!r}: expected NAME=ID with NAME one of {', '.join(names)}")
        out[name.strip()] = node.strip()
    return out


def repair_main(args: argparse.Namespace) -> int:
    require_extra("repair")
    from proton import ConnectionException, Timeout

    from .plan import read_plan
    from .repair import Settings, apply_plan, parse_journal_overrides

    say = Progress(args.quiet)
    try:
        plan = read_plan(Path(args.plan))
        journals = parse_journal_overrides(args.journal)
    except FileNotFoundError:
        fail(f"amqp-mirror repair: --plan {args.plan}: no such file")
    except (OSError, ValueError) as exc:  # unreadable, not JSON, another plan version, a bad --journal
        fail(f"amqp-mirror repair: --plan {args.plan}: {exc}")
    with_unmirrored = getattr(args, "not_mirrored", False)
    unmirrored = f"{len(plan.get('not_mirrored', []))} not mirrored, " + (
        "re-sent too" if with_unmirrored else "re-sent only with --not-mirrored"
    )
    say(f"plan: re-send {len(plan['resend'])}, remove {len(plan['remove'])} on {plan['survivor']}"
        f" ({len(plan['duplicates_expected'])} delivered twice already, {len(plan['needs_decision'])}"
        f" for the operator to decide; {unmirrored})")  # fmt: skip
    settings = Settings(
        args.broker, dry_run=args.dry_run, journals=journals, user=args.user, password=args.password,
        timeout=args.timeout, log_path=Path(str(args.plan) + ".progress"),
        plan_dir=Path(args.plan).absolute().parent, not_mirrored=with_unmirrored,
    )  # fmt: skip
    try:
        outcome = apply_plan(plan, settings, say)
    except (ConnectionException, Timeout, OSError) as exc:
        print(f"amqp-mirror repair: the survivor at {args.broker}: {exc}", file=sys.stderr)
        return FAILED
    for problem in outcome.problems:
        print(f"amqp-mirror repair: {problem}", file=sys.stderr)
    print(json.dumps(outcome.summary()))
    return FAILED if outcome.problems else 0
