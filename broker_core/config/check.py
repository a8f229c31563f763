"""`amqp-mirror check-config FILE [--strict]`: print every problem, exit 1 if any is an error."""

from __future__ import annotations

import sys

from broker_core.config.errors import ConfigError, ConfigProblem
from broker_core.config.parser import load_config


def check_config_main(path: str, strict: bool) -> int:
    try:
        _, problems = load_config(path, strict=strict)
    except ConfigError as exc:
        problems = exc.problems
    for problem in problems:
        print(_format(problem), file=sys.stderr)
    errors = sum(problem.severity == "error" for problem in problems)
    print(f"{path}: {errors} error(s), {len(problems) - errors} warning(s)", file=sys.stdout)
    return 1 if errors else 0


def _format(problem: ConfigProblem) -> str:
    return f"{problem.severity}: {problem}"
