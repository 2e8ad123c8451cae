# tidemq broker image: `docker build -t tidemq . && docker run -p 8080:8080 -v tidemq-data:/data -v ./acl.toml:/etc/tidemq/acl.toml:ro tidemq`
# The broker listens beyond loopback, so it needs an ACL file (docs/security.md); it will not start without one.

# The base is named by tag, not pinned by digest: the digest of python:3.11-slim could not be read
# from the registry where this file was written (no route to Docker Hub), and a digest copied from
# elsewhere unchecked would be worse than none. Pin it where the registry is reachable:
# `docker buildx imagetools inspect python:3.11-slim` prints the digest for `FROM python:3.11-slim@sha256:...`.

# Build stage: compiles the store's C kernels (store._kernels) into a wheel; only wheels reach the
# runtime image, not the compiler. The dependencies are built in a layer of their own, from
# pyproject.toml alone, so a change to the source reuses it.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" > requirements.txt \
    && pip wheel --wheel-dir /deps -r requirements.txt
COPY setup.py README.md ./
COPY core ./core
COPY store ./store
COPY app ./app
COPY ha ./ha
COPY cluster ./cluster
COPY pipeline ./pipeline
COPY tidemq ./tidemq
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim

# The port comes from TIDEMQ_PORT (not from the command line), so `docker run -e TIDEMQ_PORT=9090` moves the
# broker and its health check together.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TIDEMQ_PORT=8080

# Dependencies first (a layer that survives source changes), then the user, then tidemq itself.
COPY --from=build /deps /deps
RUN pip install --no-index /deps/*.whl \
    && rm -rf /deps \
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home tidemq \
    && mkdir -p /data \
    && chown tidemq:tidemq /data
COPY --from=build /wheels /wheels
RUN pip install --no-index --no-deps /wheels/*.whl \
    && rm -rf /wheels

USER tidemq
VOLUME ["/data"]
EXPOSE 8080

# /healthz answers while the process is alive; the interval leaves room for a long store recovery. It asks
# the port the broker serves (TIDEMQ_PORT), over HTTPS when TIDEMQ_TLS_CERT is set (loopback: not verified).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, ssl, sys, urllib.request; e = os.environ; tls = bool(e.get('TIDEMQ_TLS_CERT')); url = ('https' if tls else 'http') + '://127.0.0.1:' + e.get('TIDEMQ_PORT', '8080') + '/healthz'; sys.exit(urllib.request.urlopen(url, timeout=2, context=ssl._create_unverified_context() if tls else None).status != 200)"]

# SIGTERM (docker stop) answers held long-polls, drains requests and shuts the store down cleanly.
STOPSIGNAL SIGTERM
CMD ["tidemq", "serve", "--host", "0.0.0.0", "--store", "/data", "--acl", "/etc/tidemq/acl.toml"]
