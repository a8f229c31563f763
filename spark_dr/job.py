"""``spark-submit spark_dr/job.py [--master M] DC1 DC2 [options]``: the reconciliation as a Spark job.

With spark-submit the master comes from spark-submit unless ``--master`` is given here too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file by spark-submit: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_dr.cli import add_reconcile_args, reconcile_main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark_dr/job.py", description="DR reconciliation of two journals")
    add_reconcile_args(parser)
    parser.set_defaults(master=None)
    return reconcile_main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
