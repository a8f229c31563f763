"""The build of `pip install .` and of a wheel: the packages, and the compiled hot path when it can be had.

After the pure-Python build, the hot path (broker_core/compiled.py's modules) is compiled with mypyc, a
build requirement, into broker_core/_mypyc/ when a C compiler is there; without one, or with
AMQP_MIRROR_BUILD_COMPILED=0, the installation is plain Python, said in one line, and the broker says
which it runs when it starts. An editable install (`pip install -e .`, scripts/install-deps) is never
compiled here: a checkout builds with scripts/compile.py.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SKIP = "AMQP_MIRROR_BUILD_COMPILED"


def _say(line: str) -> None:
    print(f"amqp-mirror: {line}", file=sys.stderr, flush=True)


def compiler() -> str | None:
    """The C compiler the build would use (CC, else Python's own), if it is there."""
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(command)
    return words[0] if words and shutil.which(words[0]) else None


def why_not_compiled() -> str | None:
    if os.environ.get(SKIP, "1") == "0":
        return f"{SKIP}=0"
    if compiler() is None:
        cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
        return f"no C compiler ({cc})"
    return None


class BuildWithHotPath(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        package = Path(self.build_lib) / "broker_core"
        shutil.rmtree(package / "_mypyc", ignore_errors=True)  # an earlier build's, in a reused build tree
        reason = why_not_compiled()
        if reason is None:
            _say("compiling the hot path with mypyc (a few minutes on two cores) ...")
            spec = importlib.util.spec_from_file_location(
                "amqp_mirror_compile", HERE / "scripts" / "compile.py"
            )
            assert spec is not None and spec.loader is not None
            script = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(script)
            failure = script.build(HERE, package / "_mypyc")
            if failure is not None:
                print(failure, file=sys.stderr)
                reason = "mypyc failed (its output is above)"
        if reason is None:
            (package / "_mypyc.skipped").unlink(missing_ok=True)
            _say("the compiled hot path is built")
            return
        _say(f"installing the plain-Python broker: {reason}; it runs the same, slower")
        (package / "_mypyc.skipped").write_text(f"{reason} when this installation was built\n")


class MaybeCompiled(Distribution):
    """A wheel with the compiled hot path is for this platform and Python only."""

    def has_ext_modules(self) -> bool:
        return why_not_compiled() is None


# The documentation installs beside the command, in <prefix>/share/doc/amqp-mirror (a virtual environment's
# prefix: no Python version in the path), where the systemd unit's Documentation= points.
DOCS = sorted(str(p.relative_to(HERE)) for p in (HERE / "docs").glob("*.md"))
# The sample configurations, each directory as it is in the repository (deploy/examples/README.md)
EXAMPLES = sorted({p.parent for p in (HERE / "deploy" / "examples").rglob("*") if p.is_file()})

setup(
    cmdclass={"build_py": BuildWithHotPath},
    distclass=MaybeCompiled,
    data_files=[
        ("share/doc/amqp-mirror", ["README.md"]),  # its links: docs/..., deploy/README.md
        ("share/doc/amqp-mirror/docs", DOCS),
        ("share/doc/amqp-mirror/deploy", ["deploy/README.md"]),
        *(
            (
                f"share/doc/amqp-mirror/{d.relative_to(HERE)}",
                sorted(str(f.relative_to(HERE)) for f in d.iterdir() if f.is_file()),
            )
            for d in EXAMPLES
        ),
    ],
)
