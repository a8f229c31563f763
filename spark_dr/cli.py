"""Entry points of the DR tools, taking argparse namespaces (``amqp-mirror journal export|reconcile|repair``).

``add_export_args``, ``add_reconcile_args`` and ``add_repair_args`` define each command's options, so the
broker's CLI and ``spark_dr/job.py`` (spark-submit) build the same parsers.
"""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .inputs import InputError, check_journal, check_side, fail, require_extra
from .progress import Progress


def add_export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", help="a journal directory (or a broker data directory)")
    p.add_argument("out", help="the Parquet file to write")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def add_reconcile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dc1", help="DC1's journal directory or Parquet export")
    p.add_argument("dc2", help="DC2's journal directory or Parquet export")
    p.add_argument("--names", default="DC1,DC2", help="the two sides' names, comma-separated")
    p.add_argument("--survivor", help="the side a repair writes to (default: the second name)")
    p.add_argument("--out", default="dr-report", help="directory for the JSON/HTML/text reports")
    p.add_argument(
        "--no-export",
        action="store_true",
        help="read journal directories through the Spark data source (in the executors, twice) instead "
        "of exporting each to Parquet under OUT/parquet first (once, in parallel processes here)",
    )
    p.add_argument("--plan", help="also write a repair plan (JSON) to this file")
    p.add_argument("--master", default="local[2]", help="the Spark master URL")
    p.add_argument("--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions")
    p.add_argument(
        "--plan-limit", type=int, default=1_000_000, help="at most this many actions in the repair plan"
    )
    p.add_argument("--metrics-file", help="write the Pushgateway text exposition here")
    p.add_argument("--pushgateway", help="Pushgateway base URL to PUT the metrics to")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def add_repair_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plan", required=True, help="the plan written by reconcile --plan")
    p.add_argument("--broker", required=True, help="the surviving broker's AMQP URL")
    p.add_argument("--dry-run", action="store_true", help="say what would be done, change nothing")
    p.add_argument("--journal", action="append", metavar="NAME=DIR", help="where a side's journal is here")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each broker answer")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def export_main(args: argparse.Namespace) -> int:
    require_extra("journal export")
    try:
        directory = check_journal(args.directory)
    except InputError as exc:
        fail(f"amqp-mirror journal export: {exc}")
    from .export import export_journal

    say = Progress(args.quiet).throttled(2.0)
    stats = export_journal(directory, Path(args.out), progress=say)
    print(json.dumps(stats))
    return 0


def reconcile_main(args: argparse.Namespace, spark: Any = None) -> int:
    require_extra("reconcile")
    names = tuple(n.strip() for n in args.names.split(","))
    if len(names) != 2 or not all(names):
        fail(f"amqp-mirror reconcile: --names {args.names!r}: expected two comma-separated names")
    try:  # before Spark starts and anything is written
        inputs = [check_side(args.dc1), check_side(args.dc2)]
    except InputError as exc:
        fail(f"amqp-mirror reconcile: {exc}")
    from .plan import build_plan, write_plan
    from .pushgateway import write_and_push
    from .reconcile import Options, export_sides, reconcile
    from .report import console_summary, write_reports
    from .session import spark_session

    say = Progress(args.quiet)
    opts = Options(names=(names[0], names[1]), survivor=args.survivor or names[1], progress=say)
    opts.plan_limit = args.plan_limit
    if not args.no_export:
        opts.export_dir = Path(args.out) / "parquet"
    # journals are exported (in processes of their own) while Spark starts
    with ThreadPoolExecutor(1) as pool:
        exporting = pool.submit(export_sides, inputs, opts)
        if spark is None:
            say(f"starting Spark ({args.master or 'from spark-submit'})")
            spark = spark_session(args.master, args.shuffle_partitions)
        exports = exporting.result()
    result = reconcile(spark, inputs[0], inputs[1], opts, exports)
    paths = write_reports(result, Path(args.out))
    if args.plan:
        write_plan(build_plan(result), Path(args.plan))
        say(f"repair plan written to {args.plan}")
    if args.metrics_file or args.pushgateway:
        write_and_push(result, Path(args.metrics_file) if args.metrics_file else None, args.pushgateway)
        say("metrics written" + (f" and pushed to {args.pushgateway}" if args.pushgateway else ""))
    print(console_summary(result))
    print(f"  reports: {', '.join(str(p) for p in paths.values())}")
    return 0 if result["survivor_in_sync"] else 3


def repair_main(args: argparse.Namespace) -> int:
    require_extra("repair")
    from .plan import read_plan
    from .repair import apply_plan, parse_journal_overrides

    say = Progress(args.quiet)
    try:
        plan = read_plan(Path(args.plan))
    except FileNotFoundError:
        fail(f"amqp-mirror repair: --plan {args.plan}: no such file")
    except (OSError, ValueError) as exc:  # unreadable, not JSON, another plan version
        fail(f"amqp-mirror repair: --plan {args.plan}: {exc}")
    counts = {k: len(plan[k]) for k in ("resend", "acks", "duplicates_expected", "needs_decision")}
    say(f"plan: {counts}")
    outcome = apply_plan(
        plan, args.broker, dry_run=args.dry_run, journals=parse_journal_overrides(args.journal), say=say,
        timeout=args.timeout,
    )  # fmt: skip
    print(json.dumps(outcome.summary()))
    return 0
