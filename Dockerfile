# The reconciler image: the package's wheel on a slim Python, run as a non-root user.
#
#   docker build -t ghcr.io/ORG/reconciler:0.1.0 .
#   docker run --rm -e RECONCILER_DSN=postgresql://… -p 9464:9464 ghcr.io/ORG/reconciler:0.1.0
#
# The entrypoint is `reconciler`; the default command is the engine with /metrics, /healthz and
# /readyz on port 9464 (the port deploy/kubernetes/engine.yaml probes and the HEALTHCHECK polls).
# Any other command works as arguments: `docker run … ghcr.io/ORG/reconciler:0.1.0 plan`.

# Stage 1: build the wheel exactly as `python -m build --wheel` does on a developer machine.
FROM python:3.11-slim AS builder
WORKDIR /src
RUN pip install --no-cache-dir build==1.6.1
COPY pyproject.toml README.md ./
COPY reconciler ./reconciler
RUN python -m build --wheel --outdir /dist

# Stage 2: only the installed wheel and its dependencies; no compiler, no sources, no build tools.
FROM python:3.11-slim
LABEL org.opencontainers.image.title="reconciler" \
      org.opencontainers.image.description="Declarative, GitOps-driven scheduler of HTTP calls on PostgreSQL" \
      org.opencontainers.image.licenses="MIT"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /dist/ /tmp/dist/
RUN pip install --no-cache-dir /tmp/dist/*.whl \
    && rm -rf /tmp/dist \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/reconciler \
       --shell /usr/sbin/nologin reconciler
# A numeric user, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
# `tasks.d` (the default --tasks-dir) is looked up here: mount a checkout's task files at
# /home/reconciler/tasks.d to run validate, plan or apply from the image.
WORKDIR /home/reconciler
EXPOSE 9464
# No curl in the slim image: Python's urllib asks /healthz, and any error or non-2xx exits 1.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9464/healthz', timeout=4)"]
ENTRYPOINT ["reconciler"]
CMD ["engine", "--metrics-addr", "0.0.0.0:9464"]
