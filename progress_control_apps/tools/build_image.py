"""Build the container image from the repository's ``Dockerfile`` without a Docker engine, and
check what is in it (docs/operations/helm.md, "The image").

    python -m progress_control_apps.tools.build_image [--standin-base] [--ca-file FILE] [--tag TAG]

The builder is buildah (Debian's package ``buildah``: daemonless, as root or rootless), run with
``--isolation chroot`` by default so it needs no namespaces of its own. The build is the real
``Dockerfile``; the built image is then checked by running it (``buildah run``):

- ``progress-control --version`` is this checkout's version, and the process runs as uid 10001;
- the native ack recorder binds to confluent-kafka's librdkafka, the runtime's native core loads,
  and ``state_engine=rocksdb`` stores and reads a key (rocksdict, the ``runtime`` extra);
- no compiler (gcc, cc, rustc, cargo) is on the final image's ``PATH``;
- the OCI labels ``org.opencontainers.image.*`` are set, version, revision and created from
  this checkout.

``--standin-base`` is for machines that cannot pull the pinned base (no route to its registry).
It builds a local stand-in under ``localhost/progress-control-base-standin``: the same Debian
release as the pinned ``python:3.11-slim-<release>`` (debootstrap, Debian's package
``debootstrap``, from a Debian mirror), with a CPython 3.11 copied into ``/usr/local`` as the
official image has it (this interpreter's installation, or ``--python``), pip from its ensurepip.
The build then overrides ``BASE_IMAGE`` with it; the image is *not* the release image (another
patch release of CPython, no upstream digest), but every step of the ``Dockerfile`` runs as it
would on the real base. Needs root (debootstrap, chroot).

``--ca-file`` bind-mounts a CA bundle, during the build's ``RUN`` steps only (it is in no layer),
over the base's system bundle (apt over HTTPS, cargo) and pip's own certifi bundle: for a network
whose proxy re-signs TLS. Without it pip, cargo and apt trust only the base's own CAs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from progress_control import __version__
from progress_control.settings import default_cache_dir
from progress_control_apps.dev.jars import MissingToolError, find_tool

__all__ = [
    "IMAGE_CHECK",
    "OCI_LABELS",
    "STANDIN_IMAGE",
    "ImageBuildError",
    "base_release",
    "build_image",
    "dockerfile_arg",
    "main",
]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TAG = f"localhost/progress-control:{__version__}"
STANDIN_IMAGE = "localhost/progress-control-base-standin"
# What the official python:*-slim images install beside CPython's own files (their Dockerfile:
# ca-certificates, netbase, tzdata, and the libraries the interpreter's modules link against).
STANDIN_PACKAGES = (
    "ca-certificates",
    "netbase",
    "tzdata",
    "libbz2-1.0",
    "libcrypt1",
    "libexpat1",
    "libffi8",
    "liblzma5",
    "libncursesw6",
    "libnsl2",
    "libsqlite3-0",
    "libssl3t64",
    "libtirpc3t64",
    "libuuid1",
    "zlib1g",
)
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# Where the official python images (and the stand-in) keep pip's CA bundle.
PIP_CERTIFI = "/usr/local/lib/python3.11/site-packages/pip/_vendor/certifi/cacert.pem"
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"

OCI_LABELS = (
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.source",
    "org.opencontainers.image.licenses",
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.created",
)

IMAGE_CHECK = """\
from pathlib import Path
import orjson
from interceptor.native import unavailable_reason
from streams_runtime.fused import native_available
from streams_runtime.state.engines import make_kv_engine
reason = unavailable_reason()
assert reason is None, f"native ack recorder unavailable: {reason}"
assert native_available(), "the runtime's native core is not built"
engine = make_kv_engine("rocksdb", Path("/tmp/image-check-rocksdb"))
engine.put(b"key", orjson.dumps({"value": 1}))
engine.commit()
assert orjson.loads(engine.get(b"key") or b"null") == {"value": 1}
engine.close()
print("ack recorder: native; runtime core: native; state_engine=rocksdb: works")
"""


class ImageBuildError(RuntimeError):
    """The image did not build, or the built image fails a check."""


def dockerfile_arg(text: str, name: str) -> str:
    """The default of ``ARG name=...`` in a Dockerfile's text."""
    match = re.search(rf"^ARG {re.escape(name)}=(\S+)\s*$", text, re.MULTILINE)
    if match is None:
        raise ImageBuildError(f"the Dockerfile has no ARG {name}=... default")
    return match[1]


def base_release(base: str) -> str:
    """The Debian release of a ``python:<version>-slim-<release>[@digest]`` reference."""
    match = re.fullmatch(r"(?:[\w.-]+/)*python:[\d.]+-slim-([a-z]+)(?:@sha256:[0-9a-f]{64})?", base)
    if match is None:
        raise ImageBuildError(f"{base}: not a python:<version>-slim-<release> image")
    return match[1]


def _say(text: str) -> None:
    print(f"build-image: {text}", file=sys.stderr, flush=True)


def _run(command: Sequence[str | Path], *, capture: bool = False, timeout: float = 3600) -> str:
    printable = " ".join(str(part) for part in command)
    _say(f"$ {printable}")
    result = subprocess.run(
        [str(part) for part in command],
        check=False,
        text=True,
        stdout=subprocess.PIPE if capture else None,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise ImageBuildError(f"exit status {result.returncode}: {printable}")
    return result.stdout if capture else ""


class Buildah:
    """The ``buildah`` CLI with this build's global options."""

    def __init__(self, storage_driver: str | None, isolation: str) -> None:
        executable = find_tool(
            "buildah",
            "PROGRESS_CONTROL_BUILDAH",
            "buildah was not found. It builds the image without a Docker engine: "
            "`apt-get install buildah`, or set PROGRESS_CONTROL_BUILDAH to it",
        )
        self.command: list[str] = [str(executable)]
        if storage_driver:
            self.command += ["--storage-driver", storage_driver]
        self.isolation = isolation

    def __call__(self, *args: str | Path, capture: bool = False, timeout: float = 3600) -> str:
        return _run([*self.command, *args], capture=capture, timeout=timeout)

    def image_exists(self, name: str) -> bool:
        result = subprocess.run(
            [*self.command, "inspect", "--type", "image", name],
            check=False,
            capture_output=True,
            timeout=120,
        )
        return result.returncode == 0


def _python_prefix(python: Path) -> Path:
    """The installation prefix of ``python``, which must be a CPython 3.11 installed under one
    prefix (``<prefix>/bin``, ``<prefix>/lib/python3.11``), as the official images have it."""
    code = "import sys; print(sys.version_info[:2] == (3, 11)); print(sys.base_prefix)"
    out = _run([python, "-c", code], capture=True, timeout=60).split("\n")
    prefix = Path(out[1])
    if out[0] != "True" or not (prefix / "lib" / "python3.11" / "os.py").is_file():
        raise ImageBuildError(
            f"{python}: the stand-in needs a CPython 3.11 installed under one prefix "
            "(pyenv's, python.org's, /usr/local); pass --python /path/to/python3.11"
        )
    return prefix


def _standin_rootfs(release: str, prefix: Path, rootfs: Path) -> None:
    """Debian ``release`` (minbase) with the CPython at ``prefix`` in ``/usr/local``."""
    debootstrap = find_tool(
        "debootstrap",
        "PROGRESS_CONTROL_DEBOOTSTRAP",
        "debootstrap was not found. It makes the stand-in base: `apt-get install debootstrap`",
    )
    _run(
        [
            debootstrap,
            "--variant=minbase",
            f"--include={','.join(STANDIN_PACKAGES)}",
            release,
            rootfs,
            DEBIAN_MIRROR,
        ],
        timeout=1800,
    )
    local = rootfs / "usr" / "local"
    (local / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(prefix / "bin" / "python3.11", local / "bin" / "python3.11")
    for library in (prefix / "lib").glob("libpython3*.so*"):
        shutil.copy2(library, local / "lib" / library.name, follow_symlinks=False)
    shutil.copytree(prefix / "include" / "python3.11", local / "include" / "python3.11")
    skip = shutil.ignore_patterns(
        "site-packages", "__pycache__", "test", "idlelib", "tkinter", "turtledemo"
    )
    shutil.copytree(prefix / "lib" / "python3.11", local / "lib" / "python3.11", ignore=skip)
    (local / "lib" / "python3.11" / "site-packages").mkdir()
    for name in ("python3", "python"):
        (local / "bin" / name).symlink_to("python3.11")
    clean_env = ["/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]
    _run(["chroot", rootfs, "/sbin/ldconfig"])
    _run(["chroot", rootfs, *clean_env, "python3", "-m", "ensurepip", "--default-pip"])
    _run(["chroot", rootfs, *clean_env, "python3", "-c", "import ssl, sqlite3, ctypes, lzma"])
    for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (rootfs / leftover).glob("*"):
            if path.is_file():
                path.unlink()


def build_standin(buildah: Buildah, base: str, python: Path, *, rebuild: bool) -> str:
    """The local stand-in for ``base`` (built once, kept in buildah's storage)."""
    release = base_release(base)
    image = f"{STANDIN_IMAGE}:3.11-slim-{release}"
    if not rebuild and buildah.image_exists(image):
        _say(f"stand-in base {image} is in buildah's storage (--rebuild-standin to make it anew)")
        return image
    prefix = _python_prefix(python)
    cache = default_cache_dir() / "image"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix="standin-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        _say(f"making the stand-in base: Debian {release} (debootstrap) + CPython from {prefix}")
        _standin_rootfs(release, prefix, rootfs)
        archive = Path(scratch) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            for entry in sorted(rootfs.iterdir()):
                tar.add(entry, arcname=entry.name)
        container = buildah("from", "scratch", capture=True).strip()
        try:
            buildah("add", container, archive, "/")
            version = _run([python, "-c", "import platform; print(platform.python_version())"],
                           capture=True).strip()  # fmt: skip
            buildah(
                "config",
                "--env", "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env", "LANG=C.UTF-8",
                "--env", f"PYTHON_VERSION={version}",
                "--label", f"progress-control.standin-for={base}",
                "--cmd", "python3",
                container,
            )  # fmt: skip
            buildah("commit", "--rm", container, image)
        except BaseException:
            subprocess.run([*buildah.command, "rm", container], check=False, capture_output=True)
            raise
    return image


def _revision() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}-dirty" if dirty else head


def _created() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    moment = (
        datetime.datetime.fromtimestamp(int(epoch), tz=datetime.UTC)
        if epoch
        else datetime.datetime.now(tz=datetime.UTC)
    )
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def build_image(
    buildah: Buildah,
    tag: str,
    *,
    context: Path = ROOT,
    base: str | None = None,
    ca_file: Path | None = None,
) -> None:
    """``buildah bud`` of ``context``'s Dockerfile into ``tag``."""
    command: list[str | Path] = ["bud", "--isolation", buildah.isolation, "--layers"]
    if base is not None:
        command += ["--pull=never", "--build-arg", f"BASE_IMAGE={base}"]
    if ca_file is not None:
        bundle = ca_file.resolve()
        command += ["-v", f"{bundle}:{SYSTEM_CA}:ro", "-v", f"{bundle}:{PIP_CERTIFI}:ro"]
    command += [
        "--build-arg", f"VERSION={__version__}",
        "--build-arg", f"REVISION={_revision()}",
        "--build-arg", f"CREATED={_created()}",
        "--tag", tag,
        context,
    ]  # fmt: skip
    buildah(*command, timeout=5400)


def check_image(buildah: Buildah, tag: str) -> None:
    """Run the built image's checks (the module docstring lists them)."""
    config = json.loads(buildah("inspect", "--type", "image", tag, capture=True))
    labels: dict[str, str] = config["OCIv1"]["config"].get("Labels") or {}
    missing = [name for name in OCI_LABELS if not labels.get(name)]
    if missing or labels.get("org.opencontainers.image.version") != __version__:
        raise ImageBuildError(f"OCI labels missing or wrong: {missing or labels}")
    for name in OCI_LABELS:
        _say(f"label {name}={labels[name]}")
    container = buildah("from", "--pull=never", tag, capture=True).strip()
    try:

        def run(*args: str) -> str:
            return buildah(
                "run", "--isolation", buildah.isolation, container, "--", *args, capture=True
            )

        version = run("progress-control", "--version").strip()
        if version != f"progress-control {__version__}":
            raise ImageBuildError(f"progress-control --version: {version!r}")
        run("progress-control", "--help")
        uid = run("id", "-u").strip()
        if uid != "10001":
            raise ImageBuildError(f"the image runs as uid {uid}, not 10001")
        compilers = run("sh", "-c", "command -v gcc cc rustc cargo || true").split()
        if compilers:
            raise ImageBuildError(f"compilers in the final image: {compilers}")
        _say(run("python", "-c", IMAGE_CHECK).strip())
        _say(f"{version}; uid {uid}; no compiler on PATH")
    finally:
        subprocess.run([*buildah.command, "rm", container], check=False, capture_output=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m progress_control_apps.tools.build_image",
        description="Build the container image with buildah (no Docker engine) and check it.",
    )
    parser.add_argument("--tag", default=DEFAULT_TAG, help=f"image name (default {DEFAULT_TAG})")
    parser.add_argument(
        "--standin-base",
        action="store_true",
        help="build on a local stand-in of the pinned base (debootstrap + this CPython 3.11)",
    )
    parser.add_argument("--rebuild-standin", action="store_true", help="make the stand-in anew")
    parser.add_argument(
        "--python",
        type=Path,
        default=Path(sys.executable),
        help="the CPython 3.11 the stand-in copies (default: this one's installation)",
    )
    parser.add_argument(
        "--ca-file",
        type=Path,
        help="a CA bundle for pip, cargo and apt during RUN steps (TLS-re-signing proxies)",
    )
    parser.add_argument("--storage-driver", help="buildah's storage driver (e.g. vfs, overlay)")
    parser.add_argument("--isolation", default="chroot", help="buildah's isolation (chroot)")
    parser.add_argument("--context", type=Path, default=ROOT, help="build context (the repo)")
    parser.add_argument("--no-check", action="store_true", help="skip running the built image")
    args = parser.parse_args(argv)
    try:
        buildah = Buildah(args.storage_driver, args.isolation)
        pinned = dockerfile_arg((args.context / "Dockerfile").read_text(), "BASE_IMAGE")
        base = None
        if args.standin_base:
            base = build_standin(buildah, pinned, args.python, rebuild=args.rebuild_standin)
        _say(f"base: {base or pinned}" + (f" (standing in for {pinned})" if base else ""))
        build_image(buildah, args.tag, context=args.context, base=base, ca_file=args.ca_file)
        if not args.no_check:
            check_image(buildah, args.tag)
    except (ImageBuildError, MissingToolError, subprocess.TimeoutExpired) as exc:
        _say(f"failed: {exc}")
        return 1
    _say(f"built and checked {args.tag}" if not args.no_check else f"built {args.tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
