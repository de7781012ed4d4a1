# The fleet image: a3s-fleet with its fleet extra (Celery, Redis client, Flower) and the system
# programs its tools run: git, ripgrep, and bubblewrap — without it model-side `bash` fails closed
# (docs/sandbox.md). docker-compose.yml runs it as worker, Flower and the example plan's client;
# docs/fleet.md ("Containers") says what each piece is for and how scripts/container-check builds
# and runs it.
#
# BASE_IMAGE: any Debian-based image with python3 (>= 3.11) and its venv module. The default is
# Docker Hub's; scripts/container-check passes a debootstrapped Debian bookworm where Docker Hub is
# out of reach.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ripgrep bubblewrap \
    && rm -rf /var/lib/apt/lists/*
# The package lives in a venv, not in the base's Python: the same on python:3.11-slim and on a
# Debian python3, which refuses `pip install` outside a venv (PEP 668). The venv comes first on PATH,
# so `python`, `a3s-fleet` and `celery` are its own — the compose healthchecks and the example plan
# call them by those names.
ENV VIRTUAL_ENV=/opt/a3s PATH=/opt/a3s/bin:$PATH PYTHONUNBUFFERED=1
RUN python3 -m venv /opt/a3s
WORKDIR /app
COPY . /app
# A C compiler for the build only: kernel/projection/_scan.c, the projection's GIL-free scans
# (docs/kernel.md, "The C scans"), and kernel/_throttle.c, the work-tree diff's progress callback
# (docs/workspace-tools.md). The extensions are optional — without them the install passes and
# the pure-Python paths run, slower — so the compiler (and Python's headers, which
# Debian's python3 lacks) is installed for this step and removed in it.
RUN headers=$(python3 -c 'import os, sysconfig; print("" if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else "python3-dev")') \
    && apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev $headers \
    && pip install --no-cache-dir ".[fleet]" \
    && (cd / && python -c "import kernel.projection._scan, kernel._throttle") \
    && apt-get purge -y --auto-remove gcc libc6-dev binutils $headers \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
# Workers never run as root in production (Celery warns about it). Files the tools write into a
# mounted workspace belong to this uid: build with --build-arg A3S_UID=$(id -u) to match yours
# (a root host keeps the default and gives the workspace to uid 1000).
ARG A3S_UID=1000
RUN if [ "${A3S_UID}" = 0 ]; then echo "A3S_UID=0: the image runs as an unprivileged user; keep the default 1000 (docs/fleet.md)" >&2; exit 1; fi \
    && useradd --create-home --uid "${A3S_UID}" a3s
USER a3s
# The workspace is a mounted volume (docker-compose.yml mounts it here unless A3S_WORKSPACE says otherwise).
WORKDIR /workspace
EXPOSE 5555
CMD ["a3s-fleet", "worker", "--pool", "prefork", "--concurrency", "2"]
