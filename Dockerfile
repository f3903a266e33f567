# One image for every role: `tandem worker thinker|actor|tools`, `tandem flower`, `tandem api`.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LITELLM_LOCAL_MODEL_COST_MAP=True
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tandem tandem
COPY reasoner reasoner
COPY toolkit toolkit
COPY tasks tasks
COPY workers workers
COPY broker_config broker_config
RUN pip install --no-cache-dir . && useradd --create-home tandem
USER tandem
CMD ["tandem", "worker", "all"]
