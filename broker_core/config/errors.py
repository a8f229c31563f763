"""Configuration problems: what was wrong, where, and what was expected.

Loading never stops at the first problem: every check reports into a `ProblemLog`, and the loader
raises one `ConfigError` listing all errors at the end, so an operator fixes a file in one pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning"]


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
    """The configuration has errors; `problems` lists every one found (errors first, then warnings)."""

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

    @property
    def has_errors(self) -> bool:
        return any(p.severity == "error" for p in self.problems)
