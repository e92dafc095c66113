# syntax=docker/dockerfile:1
# The progress-control image: `progress-control sidecar` by default (see helm/progress-control).
# It also has the streams runtime with its `runtime` extra (orjson, and rocksdict for
# state_engine=rocksdb) and both native extensions: the ack recorder (interceptor/_ackplugin.c)
# and the runtime's native core (native/, Rust). It has no topology and no producer: for the
# chart's runtime StatefulSet build your own image FROM this one with your topology module, e.g.
#   FROM ghcr.io/kafka-progress-control/progress-control:0.1.0
#   COPY --chown=10001:10001 shop /app/shop
#   ENV PYTHONPATH=/app
# and set runtime.command to [python, -m, shop.sessions].
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ) -t progress-control:0.1.0 .
#   docker run --rm -e PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS=kafka:9092 progress-control:0.1.0
# Without a Docker engine: python -m progress_control_apps.tools.build_image (buildah; see
# docs/operations/helm.md, "The image").

# The base, pinned by digest: the official python:3.11-slim-trixie (CPython 3.11.16 on Debian 13)
# at this digest; the tag is only a label, the digest is what is pulled. Override it with
# --build-arg BASE_IMAGE=... (as build_image --standin-base does).
# Refreshing it: Renovate's dockerfile manager, or a step of the release workflow, should move it
# (neither is set up yet: .github/workflows/release.yml builds whatever this line says), by hand:
#   docker buildx imagetools inspect python:3.11-slim-trixie   (or: skopeo inspect --raw ...)
# Dependabot would not see it: it does not follow an ARG into FROM (dependabot-core#2057).
# Debian 13, not 12: the build stage compiles the native core with Debian's own Rust, and only
# trixie's (rustc 1.85) is new enough; bookworm's rustc 1.63 is older than what pyo3 0.27 needs
# (1.74), rustc-hash 2.1 (1.77) and Cargo.lock's version 4 (cargo 1.78).
ARG BASE_IMAGE=docker.io/library/python:3.11-slim-trixie@sha256:9534e5a8e315485d4061ed659af0fd78a284c015f9b73661b41d6bab25604534

# Build stage: the project's wheel with both native extensions, plus wheels of every dependency
# of the image (the core and the `runtime` extra), so the final stage installs offline and
# carries no compiler.
FROM ${BASE_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
# gcc and libc6-dev: the ack recorder (C); rustc and cargo: the native core (PyO3, built by
# setuptools-rust, which fetches the crates in native/Cargo.lock from crates.io).
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev rustc cargo \
    && rm -rf /var/lib/apt/lists/* \
    && gcc --version | head -n1 && rustc --version && cargo --version
WORKDIR /src
# What `pip wheel .` reads: the metadata, the sdist manifest, the five packages and the crate.
COPY pyproject.toml MANIFEST.in README.md LICENSE ./
COPY native/Cargo.toml native/Cargo.lock ./native/
COPY native/src ./native/src
COPY progress_control ./progress_control
COPY progress_control_apps ./progress_control_apps
COPY interceptor ./interceptor
COPY sidecar ./sidecar
COPY streams_runtime ./streams_runtime
RUN pip wheel --wheel-dir /wheels '.[runtime]'
# Both extensions are optional to a plain install (pip falls back to pure Python without a
# compiler); not to this image. Install what the final stage will, from /wheels only, and fail
# the build unless the wheel carries both and they load: the ack recorder binds to the
# librdkafka that confluent-kafka bundles (interceptor.native), the native core imports
# (streams_runtime.fused), and rocksdict imports (state_engine=rocksdb).
RUN pip install --no-index --find-links /wheels 'kafka-progress-control[runtime]' \
    && cd / \
    && python -c 'import interceptor._ackplugin, streams_runtime._native, orjson, rocksdict' \
    && python -c 'from interceptor.native import unavailable_reason as why; raise SystemExit(why())' \
    && python -c 'from streams_runtime.fused import native_available as ok; raise SystemExit(not ok())' \
    && echo 'image check: native ack recorder, native core and the runtime extra are present'

# Final stage: no compiler, no build tools; the same base.
FROM ${BASE_IMAGE}
ARG VERSION=unknown
ARG REVISION=unknown
ARG CREATED=unknown
# The repository the image is built from (ghcr.io links the package to it through this label).
ARG SOURCE=https://github.com/kafka-progress-control/kafka-progress-control
LABEL org.opencontainers.image.title="progress-control" \
      org.opencontainers.image.description="Kafka progress control: the sidecar that keeps stream time moving on idle partitions, and the streams runtime (native ack recorder, native core, RocksDB state)." \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels 'kafka-progress-control[runtime]'
# Non-root; the root filesystem can be mounted read-only (nothing is written outside /tmp).
USER 10001:10001
EXPOSE 8081
ENTRYPOINT ["progress-control"]
CMD ["sidecar"]
