"""Build the compiled hot path (`broker_core/compiled.py`) with mypyc, unless the build is current.

    .venv/bin/python scripts/compile.py [--force]

Compiles a copy of the sources in a temporary directory, so the packages never hold a build that could
shadow an edited module; the extension modules go to build/mypyc/ with a stamp of what they were built
from. The previous build stays in place until the new one is complete. Needs mypy (the test extra) and
a C compiler; exits 1 with mypyc's output if the build fails, and the broker then runs as plain Python.
`pip install .` and a wheel build the same into the installed package (broker_core/_mypyc, setup.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from broker_core import compiled  # noqa: E402

PACKAGES = ("broker_core", "connections", "filters", "mirror")  # what the compiled modules import
# mypyc writes one C file per module (multi_file) and the compiler's files are built on every core: one
# C file of the whole group took gcc about 160 s on one core, the split about 70 s on two.
SETUP = """\
import os
from concurrent.futures import ThreadPoolExecutor

from setuptools import setup
from distutils.ccompiler import CCompiler
from mypyc.build import mypycify


def compile_in_parallel(self, sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                        extra_preargs=None, extra_postargs=None, depends=None):
    macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs)
    cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)

    def one(obj):
        src, ext = build[obj]
        self._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(one, objects))
    return objects


CCompiler.compile = compile_in_parallel
setup(name="amqp_mirror_compiled", ext_modules=mypycify({files!r}, opt_level="3", multi_file=True))
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--force", action="store_true", help="build even if the build is current")
    args = parser.parse_args()
    if not args.force and compiled.why_not(env={}) is None:
        return 0  # current: nothing to say
    started = time.monotonic()
    print(f"compile: mypyc, {len(compiled.MODULES)} modules (a minute or so) ...", flush=True)
    failure = build(REPO, compiled.BUILD)
    if failure is not None:
        print(failure, file=sys.stderr)
        print("compile: mypyc failed; the broker runs as plain Python", file=sys.stderr)
        return 1
    state = "current" if compiled.why_not(env={}) is None else "NOT current (a source changed meanwhile)"
    print(f"compile: done in {time.monotonic() - started:.0f} s, build {state}")
    return 0


def build(source: Path, target: Path) -> str | None:
    """Compile the hot path of the packages under `source` into `target` (replaced only when complete);
    None when done, else mypyc's output (its end). Used by this script and by setup.py's build."""
    with tempfile.TemporaryDirectory(prefix="amqp-mirror-compile-") as tmp:
        work = Path(tmp)
        for package in PACKAGES:
            skip = shutil.ignore_patterns("__pycache__", "*.so", "_mypyc")
            shutil.copytree(source / package, work / package, ignore=skip)
        shutil.copy(source / "pyproject.toml", work / "pyproject.toml")  # mypy's settings
        files = [str(compiled.source_path(Path(), m)) for m in compiled.MODULES]
        (work / "setup_compiled.py").write_text(SETUP.format(files=files))
        result = subprocess.run(
            [sys.executable, "setup_compiled.py", "build_ext", "--inplace"],
            cwd=work,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            return result.stdout[-4000:] + "\n" + result.stderr[-4000:]
        install(work, compiled.stamp_for(work), target)
    return None


def install(work: Path, stamp: dict[str, object], target: Path) -> None:
    """Move the extension modules into a fresh `target`, replacing the old one only when complete."""
    suffix = str(stamp["ext_suffix"])
    fresh = target.with_name(target.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    for built in work.glob(f"*{suffix}"):  # the group's shared library
        shutil.copy2(built, fresh / built.name)
    for module in compiled.MODULES:
        relative = compiled.source_path(Path(), module).with_suffix(suffix)
        (fresh / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / relative, fresh / relative)
    (fresh / compiled.STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        os.replace(target, old)
    os.replace(fresh, target)
    shutil.rmtree(old, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
