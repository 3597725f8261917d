# groupcoord: a small, non-root image. Build: docker build -t groupcoord .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY coordinator ./coordinator
COPY protocol ./protocol
COPY storage ./storage
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/groupcoord groupcoord \
    && mkdir -p /var/lib/groupcoord/data && chown -R groupcoord /var/lib/groupcoord
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER groupcoord
WORKDIR /var/lib/groupcoord
VOLUME ["/var/lib/groupcoord/data"]
EXPOSE 9092 9108
# The same entry point the tests run: the `groupcoord` console script.
CMD ["groupcoord", "serve", "--listen", "0.0.0.0:9092", "--data-dir", "/var/lib/groupcoord/data", "--metrics-listen", "0.0.0.0:9108"]
