# The scrinalia-workers image: the CLI, the scheduler and the reference runner.
# One image, three commands (compose.yaml, Procfile); no port, no model.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # The package is installed non-editable: tell it where migrations/ and sql/ are.
    SCRINALIA_ROOT=/app

WORKDIR /app
COPY pyproject.toml README.md ./
COPY py_shim ./py_shim
COPY migrations ./migrations
COPY sql ./sql
RUN pip install . \
    && useradd --system --no-create-home --shell /usr/sbin/nologin scrinalia

USER scrinalia
# Each service names its own command; this one only says what the image holds.
CMD ["scrinalia-workers", "--help"]
