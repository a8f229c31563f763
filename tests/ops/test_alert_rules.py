"""deploy/prometheus: the rules parse, and every alert has a unit test that passes (`promtool test rules`)."""

from __future__ import annotations

import re
import shutil
import subprocess

from tests.conftest import require
from tests.support.broker import REPO

RULES = REPO / "deploy" / "prometheus" / "amqp-mirror-rules.yml"
TESTS = REPO / "deploy" / "prometheus" / "amqp-mirror-rules.test.yml"


def _promtool() -> str:
    found = shutil.which("promtool")
    require("promtool", found is not None, "install Debian's prometheus package (scripts/install-deps)")
    assert found is not None
    return found


def test_rules_parse() -> None:
    checked = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 11 rules found" in checked.stdout


def test_every_alert_is_unit_tested_and_passes() -> None:
    alerts = set(re.findall(r"- alert: (\w+)", RULES.read_text()))
    tested = set(re.findall(r"alertname: (\w+)", TESTS.read_text()))
    assert alerts == tested, f"alerts without a test: {sorted(alerts - tested)}"
    run = subprocess.run(
        [_promtool(), "test", "rules", TESTS.name], cwd=TESTS.parent, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout
