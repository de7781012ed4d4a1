# The fleet image: a3s-fleet with its fleet extra (Celery, Redis client, Flower) and the system
# programs its tools run: git, ripgrep, and bubblewrap — without it model-side `bash` fails closed
# (docs/sandbox.md). docker-compose.yml runs it as worker, Flower and the example plan's client;
# docs/fleet.md ("Containers") says what each piece is for and what was not run here.
FROM python:3.11-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ripgrep bubblewrap \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir ".[fleet]"
# Workers never run as root in production (Celery warns about it). Files the tools write into a
# mounted workspace belong to this uid: build with --build-arg A3S_UID=$(id -u) to match yours.
ARG A3S_UID=1000
RUN useradd --create-home --uid "${A3S_UID}" a3s
USER a3s
ENV PYTHONUNBUFFERED=1
# The workspace is a mounted volume (docker-compose.yml mounts it here unless A3S_WORKSPACE says otherwise).
WORKDIR /workspace
EXPOSE 5555
CMD ["a3s-fleet", "worker", "--pool", "prefork", "--concurrency", "2"]
