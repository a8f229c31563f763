"""`amqp-mirror check-config FILE [--strict]`: print every problem, exit 1 if any is an error.

Each problem is one line, its severity first (``error:``, ``warning:``, ``note:``); the last line counts
them. `amqp-mirror run` prints a file it refuses the same way, and says it did not start.
"""

from __future__ import annotations

import sys
from typing import TextIO

from broker_core.config.errors import ConfigError, ConfigProblem, count
from broker_core.config.parser import load_config


def check_config_main(path: str, strict: bool) -> int:
    try:
        _, problems = load_config(path, strict=strict)
    except ConfigError as exc:
        problems = exc.problems
    print_problems(problems, sys.stderr)
    errors = sum(problem.severity == "error" for problem in problems)
    print(f"{path}: {count(problems)}", file=sys.stdout)
    return 1 if errors else 0


def print_problems(problems: list[ConfigProblem], stream: TextIO) -> None:
    for problem in problems:
        print(format_problem(problem), file=stream)


def format_problem(problem: ConfigProblem) -> str:
    return f"{problem.severity}: {problem}"
