# The fleet image: the a3s-fleet package with its fleet extra (Celery, Redis client, Flower).
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends git ripgrep && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir ".[fleet]"
# Workers never run as root in production (Celery warns about it); the workspace is a mounted volume.
RUN useradd --create-home --uid 1000 a3s
USER a3s
