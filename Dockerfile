# tidemq broker image: `docker build -t tidemq . && docker run -p 8080:8080 -v tidemq-data:/data -v ./acl.toml:/etc/tidemq/acl.toml:ro tidemq`
# The broker listens beyond loopback, so it needs an ACL file (docs/security.md); it will not start without one.

# Build stage: compiles the store's C kernels (store._kernels) into wheels; only the wheels reach
# the runtime image, not the compiler.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY store ./store
COPY app ./app
COPY ha ./ha
COPY cluster ./cluster
COPY pipeline ./pipeline
COPY tidemq ./tidemq
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home tidemq \
    && mkdir -p /data \
    && chown tidemq:tidemq /data

USER tidemq
VOLUME ["/data"]
EXPOSE 8080

# /healthz answers while the process is alive; the interval leaves room for a long store recovery.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]

# SIGTERM (docker stop) answers held long-polls, drains requests and shuts the store down cleanly.
STOPSIGNAL SIGTERM
CMD ["tidemq", "serve", "--host", "0.0.0.0", "--port", "8080", "--store", "/data", "--acl", "/etc/tidemq/acl.toml"]
