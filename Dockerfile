# One image for every role: `tandem worker thinker|actor|tools`, `tandem flower`, `tandem api`.
# The workers' stack and the OTLP exporter (`worker` and `otlp` extras), so setting OTEL_* turns
# tracing on (docs/tracing.md#docker-compose-and-kubernetes). The image writes nothing outside /tmp
# at run time: it runs with a read-only root file system (docs/kubernetes.md#security-context).
# tests/integration/test_image.py runs this file's install line and CMD in a fresh environment.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY tandem tandem
COPY reasoner reasoner
COPY toolkit toolkit
COPY tasks tasks
COPY workers workers
COPY broker_config broker_config
COPY client client
# pyproject.toml's build backend (backend-path): the install line builds the wheel with it
COPY build_backend build_backend
RUN pip install --no-cache-dir '.[worker,otlp]' && useradd --create-home --uid 1000 tandem
USER tandem
CMD ["tandem", "worker", "all"]
