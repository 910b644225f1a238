# The scrinalia-workers image: the CLI, the scheduler and the reference runner.
# One image, three commands (compose.yaml, Procfile); no port, no model.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The package is built as a wheel and installed: it carries sql/ and migrations/ as
# package data (setup.py), so the sources are removed: nothing points at a tree.
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY py_shim ./py_shim
COPY migrations ./migrations
COPY sql ./sql
RUN pip install . \
    && cd / && rm -rf /src \
    && python -c "from scrinalia_workers import sqlfiles; assert 'site-packages' in str(sqlfiles.project_root())" \
    && useradd --system --no-create-home --shell /usr/sbin/nologin scrinalia

WORKDIR /app
USER scrinalia
# Each service names its own command; this one only says what the image holds.
CMD ["scrinalia-workers", "--help"]
