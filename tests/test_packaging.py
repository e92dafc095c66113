"""The distribution as users get it: the wheel's metadata and what installing its core brings.

A producer app that only wants the interceptor installs the core: no pyspark, no matplotlib.
These tests build the real wheel (pip fetches the build backend from PyPI) and install its core
into a fresh virtualenv (dependencies from PyPI).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from progress_control import __version__
from tests.paths import ROOT

# One worker builds the wheel (a module fixture) and runs every test that installs it: on several,
# each would build it again.
pytestmark = [pytest.mark.network, pytest.mark.xdist_group("packaging")]

PACKAGES = (
    "progress_control",
    "progress_control_apps",
    "interceptor",
    "sidecar",
    "streams_runtime",
)
CORE = {
    "confluent-kafka",
    "apscheduler",
    "pydantic",
    "pydantic-settings",
    "structlog",
    "prometheus-client",
    "pyyaml",
    "urllib3",
}
CORE_BUDGET_MB = 40


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match[0]).lower()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what the distribution is built from: setuptools writes build/ and *.egg-info
    beside the sources."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "target")
    for package in (*PACKAGES, "native"):
        shutil.copytree(ROOT / package, source / package, ignore=ignore)
    return source


def _build_env(**overrides: str) -> dict[str, str]:
    # The native core's compiled dependencies from the project's cache (./dev sets the same).
    env = {"CARGO_TARGET_DIR": str(ROOT / ".cache" / "cargo-target"), **os.environ}
    return env | overrides


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        check=True,
        timeout=900,
        env=_build_env(),
    )
    (built,) = out.glob("kafka_progress_control-*.whl")
    return built


def _metadata(wheel: Path) -> tuple[list[str], object]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        return names, Parser().parsestr(archive.read(meta).decode())


def test_core_requirements_are_small_and_extras_hold_the_rest(wheel: Path) -> None:
    _names, meta = _metadata(wheel)
    requires = meta.get_all("Requires-Dist")  # type: ignore[attr-defined]
    core = {_name(r) for r in requires if "extra ==" not in r}
    assert core == CORE

    def extra(name: str) -> set[tuple[str, frozenset[str], str]]:
        """(name, extras, version specifier) of what ``[name]`` adds."""
        parsed = [Requirement(r) for r in requires]
        return {
            (_name(r.name), frozenset(r.extras), str(r.specifier))
            for r in parsed
            if r.marker is not None and r.marker.evaluate({"extra": name})
        }

    assert set(meta.get_all("Provides-Extra")) >= {"runtime", "spark", "demo", "all", "dev", "quix"}  # type: ignore[attr-defined]
    # The runtime's own confluent-kafka floor (the core's is lower, for Quix Streams beside it);
    # orjson speeds up its JSON serde; rocksdict is the optional RocksDB engine.
    assert {name for name, _, _ in extra("runtime")} == {"confluent-kafka", "orjson", "rocksdict"}
    assert ("confluent-kafka", frozenset(), "<3,>=2.13.2") in extra("runtime")
    assert {name for name, _, _ in extra("quix")} == {"quixstreams"}
    # The connector jars are fetched at the installed pyspark version: one exact pin.
    assert extra("spark") == {("pyspark", frozenset(), f"=={metadata.version('pyspark')}")}
    itself = "kafka-progress-control"
    demo = extra("demo")
    assert (itself, frozenset({"runtime", "spark"}), "") in demo
    assert {name for name, _, _ in demo} == {itself, "matplotlib"}
    assert extra("all") == {(itself, frozenset({"runtime", "spark", "demo"}), "")}
    assert (itself, frozenset({"all"}), "") in extra("dev")


def test_every_requirement_has_a_floor_and_a_major_ceiling() -> None:
    """Floors as low as the code needs, so the core installs beside an application's own pins
    (``./dev test-lowest`` runs the core's tests at every floor), and ceilings at the next major
    version. structlog is calendar-versioned: its year is no major version, so no ceiling."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [
        Requirement(r) for extra in project["optional-dependencies"].values() for r in extra
    ]
    for requirement in requirements:
        name = _name(requirement.name)
        operators = {spec.operator: spec.version for spec in requirement.specifier}
        if name == "kafka-progress-control":
            assert not operators, requirement
        elif name == "pyspark":  # the connector jars are fetched at exactly this version
            assert set(operators) == {"=="}, requirement
        else:
            assert ">=" in operators, f"{requirement}: no floor"
            assert "<" in operators or name == "structlog", f"{requirement}: no ceiling"
    core = {_name(r.name): r for r in requirements[: len(project["dependencies"])]}
    assert set(core) == CORE
    assert "<4" in str(core["apscheduler"].specifier).split(",")  # 4.x is another API


def test_metadata_is_fit_to_publish(wheel: Path) -> None:
    names, meta = _metadata(wheel)
    assert meta["Name"] == "kafka-progress-control"  # type: ignore[index]
    assert meta["Version"] == __version__  # type: ignore[index]
    assert meta["License-Expression"] == "Apache-2.0"  # type: ignore[index]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    classifiers = meta.get_all("Classifier")  # type: ignore[attr-defined]
    assert "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the expression says it
    assert meta["Requires-Python"] == ">=3.11"  # type: ignore[index]
    assert meta.get_payload().startswith("# kafka-progress-control")  # type: ignore[attr-defined]
    for package in PACKAGES:
        assert f"{package}/py.typed" in names, package
    # No generic top-level import names: the four the product is known by, nothing else.
    top_level = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top_level == set(PACKAGES)
    assert not [n for n in names if n.startswith("progress_control_apps/tools/")]  # test tooling
    assert "progress_control_apps/dev/poms/kafka-broker.xml" in names
    # Both extensions on CPython's stable ABI (the native core where cargo was there to build
    # it, as here): one wheel for every CPython from 3.11.
    assert wheel.name.endswith("-cp311-abi3-linux_x86_64.whl"), wheel.name
    assert "interceptor/_ackplugin.abi3.so" in names
    if shutil.which("cargo"):
        assert "streams_runtime/_native.abi3.so" in names
    assert [n for n in names if n.endswith("entry_points.txt")]


def _site_packages_kb(venv: Path) -> int:
    (site,) = venv.glob("lib/python3*/site-packages")
    total = 0
    for root, _dirs, files in os.walk(site):
        for name in files:
            total += (Path(root) / name).lstat().st_size
    return total // 1024


def test_core_installs_small_and_works_without_extras(wheel: Path, tmp_path: Path) -> None:
    """A fresh virtualenv with the core only: within the size budget, the producer side and the
    runtime import, and the parts that need an extra say which one."""
    empty, core = tmp_path / "empty", tmp_path / "core"
    for venv in (empty, core):
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(core / "bin" / "python")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        check=True,
        timeout=600,
    )
    added_mb = (_site_packages_kb(core) - _site_packages_kb(empty)) / 1024
    print(f"core install: {added_mb:.1f} MB over an empty virtualenv")
    assert added_mb <= CORE_BUDGET_MB

    installed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    names = {_name(line) for line in installed.splitlines()}
    assert not names & {"pyspark", "matplotlib", "numpy", "py4j"}

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    code = (
        "import progress_control, interceptor, sidecar, streams_runtime\n"
        "from interceptor import Producer\n"
        "from sidecar.service import ProgressControlSidecar\n"
        "from streams_runtime import App\n"
        "for package, extra in (\n"
        "    ('progress_control_apps.spark', 'spark'), ('progress_control_apps.demo', 'demo')\n"
        "):\n"
        "    try:\n"
        "        __import__(package)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        assert f\"pip install 'kafka-progress-control[{extra}]'\" in str(exc), exc\n"
        "    else:\n"
        "        raise AssertionError(package + ' imported without its extra')\n"
    )
    # From a directory without the sources, so only the installed wheel is importable.
    subprocess.run([python, "-c", code], check=True, timeout=120, cwd=tmp_path, env=env)
    cli = str(core / "bin" / "progress-control")
    version = subprocess.run(
        [cli, "--version"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert version.stdout.strip() == f"progress-control {__version__}"
    for args, extra in ((["demo"], "demo"), (["fetch-jars", "spark"], "spark")):
        result = subprocess.run(
            [cli, *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=env,
        )
        assert result.returncode == 2, result.stderr
        assert f"pip install 'kafka-progress-control[{extra}]'" in result.stderr
        assert "Traceback" not in result.stderr


def test_the_release_wheel_is_manylinux_with_both_extensions_and_passes_its_smoke_test(
    wheel: Path, tmp_path: Path
) -> None:
    """What ``./dev dist`` checks, on the wheel built here: cp311-abi3 with both native
    extensions, made manylinux by ``auditwheel repair``, ``twine check --strict``, then
    installed with the runtime extra in a fresh virtualenv where the smoke test passes
    (native paths, a topology on the test driver, the command)."""
    from progress_control_apps.tools import dist

    copy = Path(shutil.copy(wheel, tmp_path / wheel.name))
    dist.check_extensions(copy)
    repaired = dist.repair(copy, tmp_path)
    tag = rf"-cp311-abi3-manylinux_2_\d+_{platform.machine()}\.whl$"
    assert re.search(tag, repaired.name), repaired.name
    subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(repaired)], check=True, timeout=120
    )
    dist.smoke_test(repaired, __version__)


def test_the_sdist_installs_without_a_rust_toolchain_and_runs_the_chain(
    source: Path, tmp_path: Path
) -> None:
    """The sdist carries the native core's crate; built where cargo is not on PATH, the
    install still works, and every chain runs processor by processor (nothing is fused), the
    log says so."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--outdir", str(dist), str(source)],
        check=True,
        timeout=600,
        capture_output=True,
    )
    (sdist,) = dist.glob("kafka_progress_control-*.tar.gz")
    with tarfile.open(sdist) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"native/Cargo.toml", "native/Cargo.lock", "native/src/lib.rs"} <= members
    cargo = shutil.which("cargo")
    path = os.pathsep.join(
        d
        for d in os.environ["PATH"].split(os.pathsep)
        if cargo is None or Path(d) != Path(cargo).parent
    )
    target = tmp_path / "installed"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(sdist),
        ],
        check=True,
        timeout=600,
        env=_build_env(PATH=path),
    )
    assert not list(target.glob("streams_runtime/_native*.so"))
    code = (
        "import streams_runtime, pathlib, sys\n"
        f"assert pathlib.Path(streams_runtime.__file__).is_relative_to({str(target)!r})\n"
        "from streams_runtime import RuntimeSettings, SessionWindows, StreamsBuilder\n"
        "from streams_runtime import until_window_closes\n"
        "builder = StreamsBuilder()\n"
        "builder.stream('in').group_by_key().windowed_by(SessionWindows(gap_ms=1)).count()"
        ".suppress(until_window_closes()).to_stream().to('out')\n"
        "settings = RuntimeSettings(application_id='a', bootstrap_servers='b:1')\n"
        "assert settings.native_core and 'native' not in builder.build('a', settings).describe()\n"
    )
    # -S: without site, so this checkout's editable install (a .pth file) stays out of the way;
    # the dependencies from this environment's site-packages, after the install.
    search = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])
    result = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": search},
    )
    assert result.returncode == 0, result.stderr
    assert "native core is not built" in result.stderr


def test_the_runtime_refuses_a_confluent_kafka_below_its_own_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The core allows confluent-kafka 2.12 (Quix Streams beside it pins <2.13); the runtime
    needs 2.13.2 and says which extra brings it, before it connects anywhere."""
    from progress_control.settings import ConfigurationError
    from streams_runtime import App, StreamsBuilder

    real = metadata.version
    monkeypatch.setattr(
        metadata, "version", lambda name: "2.12.2" if name == "confluent-kafka" else real(name)
    )
    with pytest.raises(ConfigurationError, match=r"installed: 2\.12\.2.*\[runtime\]"):
        App(StreamsBuilder(), application_id="a", bootstrap_servers="127.0.0.1:1")
