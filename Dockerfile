# The application as one image, for the compose `replicas` profile (docker-compose.yml): the
# `market-analyst` command is its entry point, so `docker compose run inbox-1 approvers add NAME` runs
# the CLI with the replicas' settings.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY src ./src
COPY graphs ./graphs
RUN pip install --no-cache-dir . && useradd --create-home analyst \
    && install -d -o analyst -m 0700 /var/lib/market-analyst
USER analyst
ENTRYPOINT ["market-analyst"]
CMD ["--help"]
