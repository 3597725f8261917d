# groupcoord: a small, non-root image.
#   docker build -t groupcoord:0.1.0 .
#   docker run -p 9092:9092 -p 9108:9108 -v gc-data:/var/lib/groupcoord/data \
#       -e GROUPCOORD_TOPIC=orders:12 -e GROUPCOORD_ADVERTISED_HOST=127.0.0.1 groupcoord:0.1.0
# Every setting is a GROUPCOORD_* variable, a flag after `serve`, or a key of a TOML file passed
# with --config (see `groupcoord serve --help`); the ENV below are the image's defaults.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY coordinator ./coordinator
COPY protocol ./protocol
COPY storage ./storage
COPY pipeline ./pipeline
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/groupcoord groupcoord \
    && mkdir -p /var/lib/groupcoord/data && chown -R groupcoord:groupcoord /var/lib/groupcoord
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
ENV PYTHONUNBUFFERED=1 \
    GROUPCOORD_LISTEN=0.0.0.0:9092 \
    GROUPCOORD_DATA_DIR=/var/lib/groupcoord/data \
    GROUPCOORD_METRICS_LISTEN=0.0.0.0:9108 \
    GROUPCOORD_SHUTDOWN_TIMEOUT_MS=8000
USER 10001:10001
WORKDIR /var/lib/groupcoord
VOLUME ["/var/lib/groupcoord/data"]
EXPOSE 9092 9108
# /healthz answers as soon as the process runs (also while the log replays); no curl in the image.
# The port is read from GROUPCOORD_METRICS_LISTEN, so changing that variable keeps it right.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('GROUPCOORD_METRICS_LISTEN', ':9108').rpartition(':')[2]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2)"]
# SIGTERM: stop accepting, answer parked requests, flush the log, exit 0 within
# GROUPCOORD_SHUTDOWN_TIMEOUT_MS (below docker stop's default 10 s grace).
STOPSIGNAL SIGTERM
# The same entry point the tests run: the `groupcoord` console script (coordinator.cli:main).
# Exec form: groupcoord is PID 1 and receives the signals itself.
CMD ["groupcoord", "serve"]
