"""The compose file's `replicas` profile, read as docker compose reads it (docker itself cannot run
here): two inbox replicas on the shared servers with the settings that make them one inbox, and a
balancer whose configuration sends requests to both, the one proxy the replicas believe."""

from __future__ import annotations

import re
from typing import Any

import yaml

from market_analyst.settings import VARIABLES
from tests.support import REPO

REPLICAS = ("inbox-1", "inbox-2")


def _compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())  # merges <<: anchors
    return document


def test_the_replicas_profile_runs_two_inboxes_on_the_shared_servers():
    services = _compose()["services"]
    profiled = {name for name, service in services.items() if "replicas" in service.get("profiles", [])}
    assert profiled == {*REPLICAS, "balancer"}
    assert all(not services[name].get("profiles") for name in ("postgres", "redis", "qdrant"))  # `make up`
    for name in REPLICAS:
        service = services[name]
        env = service["environment"]
        assert set(env) <= set(VARIABLES), set(env) - set(VARIABLES)  # only settings that exist
        assert env["MA_RECORDS"] == "postgres" and env["MA_CHECKPOINTER"] == "postgres"
        assert re.fullmatch(r"postgresql://analyst:analyst@postgres:5432/market_analyst", env["POSTGRES_URL"])
        assert env["QDRANT_URL"] == "http://qdrant:6333"
        assert env["MA_MASTER_KEY"].startswith("${MA_MASTER_KEY:?")  # from the environment, or none start
        assert set(service["depends_on"]) == {"postgres", "qdrant"}
        # A service name resolves only on a network both services are on (no `networks` is `default`).
        for server in service["depends_on"]:
            assert set(service["networks"]) & set(services[server].get("networks", ["default"])), server
        assert service["command"][:1] == ["serve"] and "--allow-remote" in service["command"]
        assert service["build"] == "." and "MA_ARCHIVE_DIR" not in env  # the archive is in PostgreSQL
    assert services["inbox-1"]["environment"] == services["inbox-2"]["environment"]
    postgres = services["postgres"]["environment"]
    assert f"{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}@" in services["inbox-1"][
        "environment"
    ]["POSTGRES_URL"] and services["inbox-1"]["environment"]["POSTGRES_URL"].endswith(postgres["POSTGRES_DB"])
    dockerfile = (REPO / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["market-analyst"]' in dockerfile and "pip install --no-cache-dir ." in dockerfile


def test_the_balancer_sends_requests_to_both_replicas_and_is_the_proxy_they_believe():
    compose = _compose()
    services = compose["services"]
    balancer = services["balancer"]
    [mount] = balancer["volumes"]
    source, target, _ = mount.split(":")
    assert target == "/etc/nginx/conf.d/default.conf" and balancer["image"].startswith("nginx:")
    config = (REPO / source).read_text()
    [upstream] = re.findall(r"upstream (\w+) \{(.*?)\}", config, re.S)
    port = services["inbox-1"]["command"][services["inbox-1"]["command"].index("--port") + 1]
    assert re.findall(r"^\s*server ([\w-]+):(\d+)", upstream[1], re.M) == [(name, port) for name in REPLICAS]
    assert f"proxy_pass http://{upstream[0]};" in config
    assert "non_idempotent" not in config  # a POST that reached one replica is never sent to the other
    [listen] = re.findall(r"listen (\d+);", config)
    assert balancer["ports"] == [f"{listen}:{listen}"]
    address = balancer["networks"]["inbox"]["ipv4_address"]
    assert all(services[name]["environment"]["MA_TRUSTED_PROXIES"] == address for name in REPLICAS)
    [subnet] = compose["networks"]["inbox"]["ipam"]["config"]
    assert address.rsplit(".", 1)[0] == subnet["subnet"].rsplit(".", 1)[0]
    assert "--behind-proxy" in services["inbox-1"]["command"]
