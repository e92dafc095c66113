# syntax=docker/dockerfile:1
# The progress-control image: `progress-control sidecar` by default (see helm/progress-control).
# It also has the streams runtime, but no topology and no producer: for the chart's runtime
# StatefulSet build your own image FROM this one with your topology module, e.g.
#   FROM progress-control:0.1.0
#   COPY --chown=10001:10001 shop /app/shop
#   ENV PYTHONPATH=/app
# and set runtime.command to [python, -m, shop.sessions].
#   docker build -t progress-control:0.1.0 .
#   docker run --rm -e PROGRESS_CONTROL_KAFKA__BOOTSTRAP_SERVERS=kafka:9092 progress-control:0.1.0

# Build stage: the project's wheel, plus wheels of every dependency (sdists such as pyspark are
# built here, so the runtime stage installs offline and carries no build tools).
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY progress_control ./progress_control
COPY interceptor ./interceptor
COPY sidecar ./sidecar
COPY streams_runtime ./streams_runtime
RUN pip wheel --wheel-dir /wheels .

# Runtime stage.
FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels kafka-progress-control
# Non-root; the root filesystem can be mounted read-only (nothing is written outside /tmp).
USER 10001:10001
EXPOSE 8081
ENTRYPOINT ["progress-control"]
CMD ["sidecar"]
