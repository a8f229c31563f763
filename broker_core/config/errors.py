"""Configuration problems: what was wrong, where, and what was expected.

Loading never stops at the first problem: every check reports into a `ProblemLog`, and the loader
raises one `ConfigError` listing all errors at the end, so an operator fixes a file in one pass.

Three severities: an *error* (the broker would not run as the file says: refused), a *warning* (it runs,
differently in a way the operator should know: a deprecated name read as its successor, a skipped
acceptor), a *note* (something Artemis has that changes nothing here, said once with its line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "note"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "note")


@dataclass(frozen=True)
class ConfigProblem:
    """One finding, printed as ``file:line: element/@attribute: message; expected``."""

    file: str
    line: int | None
    element_path: str
    attribute: str | None
    message: str
    expected: str | None = None
    severity: Severity = "error"

    def __str__(self) -> str:
        where = self.element_path
        if self.attribute:
            where = f"{where}/@{self.attribute}" if where else f"@{self.attribute}"
        location = f"{self.file}:{self.line}" if self.line is not None else self.file
        text = f"{location}: {where}: {self.message}" if where else f"{location}: {self.message}"
        return f"{text}; expected {self.expected}" if self.expected else text


class ConfigError(Exception):
    """The configuration has errors; `problems` lists every one found (warnings and notes too)."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        errors = [p for p in problems if p.severity == "error"]
        super().__init__("\n".join(str(p) for p in errors) or "invalid configuration")


@dataclass
class ProblemLog:
    """Collects problems for one file; the parser passes it down instead of raising."""

    file: str
    problems: list[ConfigProblem] = field(default_factory=list)

    def error(
        self, line: int | None, path: str, message: str, expected: str | None = None, attr: str | None = None
    ) -> None:
        self.problems.append(ConfigProblem(self.file, line, path, attr, message, expected, "error"))

    def warning(
        self, line: int | None, path: str, message: str, expected: str | None = None, attr: str | None = None
    ) -> None:
        self.problems.append(ConfigProblem(self.file, line, path, attr, message, expected, "warning"))

    def note(
        self, line: int | None, path: str, message: str, expected: str | None = None, attr: str | None = None
    ) -> None:
        self.problems.append(ConfigProblem(self.file, line, path, attr, message, expected, "note"))

    @property
    def has_errors(self) -> bool:
        return any(p.severity == "error" for p in self.problems)


def count(problems: list[ConfigProblem]) -> str:
    """``2 errors, 1 warning, 10 notes``: how many of each severity (the ones with none left out, but at
    least the errors)."""
    parts = []
    for severity in SEVERITIES:
        n = sum(problem.severity == severity for problem in problems)
        if n or severity == "error":
            parts.append(f"{n} {severity}{'' if n == 1 else 's'}")
    return ", ".join(parts)
