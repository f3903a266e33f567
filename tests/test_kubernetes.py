"""The Kubernetes manifests (``deploy/kubernetes``), rendered and checked offline.

Each overlay is rendered with ``kubectl kustomize``; every object of Kubernetes' own API is
validated against its schema (``kubernetes-validate``, strict: an unknown field fails), for the
oldest Kubernetes the manifests support and the newest the validator knows. KEDA's objects are not
in that schema: they are checked field by field. Then what docs/kubernetes.md promises: one
Deployment per role, the API and Flower; readiness on ``tandem health``, liveness that never reaches
Redis or the broker; grace periods longer than the lease; disruption budgets; credentials only in
Secrets; autoscaling on each role's queue with a target of the pods' threads.

Skipped, saying so, where ``kubectl`` is missing: neither PyPI nor Debian's packages carry it, so
``.ci/run`` cannot install it on a fresh machine (the CI machine has it). The quick start, the
components, the security contexts and the network policies: tests/test_kubernetes_extras.py and
tests/test_kubernetes_policies.py.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import kubernetes_validate
import pytest

from tandem.broker_config import ROLE_QUEUES, TASK_QUEUES, Settings
from tandem.tasks.metrics import STEPS_RUNNING, QueueDepthCollector
from tests import kustomize
from tests.kustomize import KUSTOMIZE, Objects

ROOT = Path(__file__).resolve().parent.parent
OVERLAYS = ("redis-broker", "rabbitmq-quorum")
"""The overlays for production, each on its broker (``quickstart``: tests/test_kubernetes_extras.py)."""
TRIGGERS = {"redis-broker": "prometheus", "rabbitmq-quorum": "rabbitmq"}
VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
"""The oldest Kubernetes the manifests support (``unhealthyPodEvictionPolicy`` is beta there) and
the newest the validator knows."""
WORKERS = {f"tandem-{role}": role for role in ROLE_QUEUES}
SECRET = "tandem-secrets"
CREDENTIALS = re.compile(r"_URL$|_KEY$|TOKEN|PASSWORD|AUTH")
"""Names of settings that hold credentials: they come from a Secret, never a ConfigMap."""
COMMIT_MARGIN = 30
"""Seconds a step's commit may take after its call ended (a few Redis round trips, one of them
perhaps waiting out a failover): each worker's grace period is its call's bound plus this."""

_render = kustomize.render
_of = kustomize.of
_container = kustomize.container
_config = kustomize.config


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> tuple[str, Objects]:
    return request.param, _render(KUSTOMIZE / "overlays" / request.param)


def _threads(deployment: dict[str, Any]) -> int:
    command = _container(deployment)["command"]
    return int(command[command.index("--concurrency") + 1])


def test_the_base_and_every_overlay_are_valid_kubernetes() -> None:
    for path in [KUSTOMIZE / "base", *(KUSTOMIZE / "overlays" / name for name in (*OVERLAYS, "quickstart"))]:
        objects = _render(path)
        checked = [o for o in objects if not o["apiVersion"].startswith("keda.sh/")]
        assert len(checked) >= 10, path
        for obj in checked:
            for version in VERSIONS:
                kubernetes_validate.validate(obj, version, strict=True)


def test_a_field_kubernetes_does_not_know_is_caught() -> None:
    deployment = _of(_render(KUSTOMIZE / "base"), "Deployment")["tandem-actor"]
    _container(deployment)["terminationGracePeriod"] = 150  # belongs to the pod, spelt otherwise
    with pytest.raises(kubernetes_validate.ValidationError, match="terminationGracePeriod"):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_one_deployment_per_role_the_api_and_flower(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    deployments = _of(objects, "Deployment")
    assert set(deployments) == {*WORKERS, "tandem-api", "tandem-flower"}
    for name, role in WORKERS.items():
        assert _container(deployments[name])["command"][:3] == ["tandem", "worker", role]
    assert _container(deployments["tandem-api"])["command"][:2] == ["tandem", "api"]
    assert _container(deployments["tandem-flower"])["command"][:2] == ["tandem", "flower"]
    assert {_container(d)["image"] for d in deployments.values()} == {"tandem:latest"}
    services = _of(objects, "Service")
    for name in ("tandem-api", "tandem-flower"):
        labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert services[name]["spec"]["selector"].items() <= labels.items()


def test_readiness_asks_tandem_health_and_liveness_never_reaches_redis(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    deployments = _of(objects, "Deployment")
    for name in [*WORKERS, "tandem-api"]:
        container = _container(deployments[name])
        assert container["readinessProbe"]["exec"]["command"][:2] == ["tandem", "health"], name
        assert "exec" not in container["livenessProbe"], name  # not tied to Redis or the broker
    live = {"python_info"}  # a metric of the process itself (prometheus_client's platform collector)
    for name in WORKERS:
        container = _container(deployments[name])
        for probe in ("livenessProbe", "startupProbe"):
            get = container[probe]["httpGet"]
            assert get["port"] == "metrics" and container["ports"][0]["name"] == "metrics"
            url = urlparse(get["path"])
            assert url.path == "/metrics" and set(parse_qs(url.query)["name[]"]) == live
    assert _container(deployments["tandem-api"])["livenessProbe"]["httpGet"]["path"] == "/openapi.json"


def test_each_grace_period_is_the_calls_bound_plus_the_commit(overlay: tuple[str, Objects]) -> None:
    """A step's model call ends within its role's TIMEOUT (every retry included), a tool call
    within TANDEM_TOOL_TIMEOUT; the grace period adds the commit's margin, and the ConfigMap names
    the timeouts itself, so the grace periods follow the numbers they were derived from."""
    name_, objects = overlay
    config = _config(objects)
    for key in ("TANDEM_THINKER_TIMEOUT", "TANDEM_ACTOR_TIMEOUT", "TANDEM_TOOL_TIMEOUT"):
        assert config.get(key), f"config.env must set {key}: the grace periods are derived from it"
    placeholders = {"TANDEM_BROKER_URL": "amqp://u:p@rabbitmq:5672/tandem"} if "rabbitmq" in name_ else {}
    settings = Settings.from_env({**config, **placeholders})  # the ConfigMap holds valid settings
    guide = (ROOT / "docs" / "kubernetes.md").read_text()
    deployments = _of(objects, "Deployment")
    for name, role in WORKERS.items():
        pod = deployments[name]["spec"]["template"]["spec"]
        grace = pod["terminationGracePeriodSeconds"]
        longest = settings.tool_timeout if role == "tools" else settings.role(role).timeout
        assert grace >= longest + COMMIT_MARGIN, f"{name}: a {role} step ending its call could not commit"
        assert grace > settings.lease_seconds, name
        stated = f"{longest:g} s + {COMMIT_MARGIN} s = {grace} s"
        assert stated in guide, f"docs/kubernetes.md does not state {name}'s grace period: {stated!r}"
        env = {e["name"] for e in _container(deployments[name]).get("env", [])}
        assert "REMAP_SIGTERM" not in env | set(config)  # SIGTERM stays Celery's warm shutdown


def test_every_role_and_the_api_have_a_disruption_budget(overlay: tuple[str, Objects]) -> None:
    _, objects = overlay
    deployments = _of(objects, "Deployment")
    budgets = list(_of(objects, "PodDisruptionBudget").values())
    for name in [*WORKERS, "tandem-api"]:
        labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        [budget] = [b for b in budgets if b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow", name


def test_credentials_come_from_secrets_and_each_pod_gets_only_its_own(
    overlay: tuple[str, Objects],
) -> None:
    _, objects = overlay
    assert not _of(objects, "Secret"), "the manifests must never carry a Secret's values"
    in_config = [key for key in _config(objects) if CREDENTIALS.search(key)]
    assert in_config == [], f"credentials in a ConfigMap: {in_config}"
    given: dict[str, set[str]] = {}
    for name, deployment in _of(objects, "Deployment").items():
        container = _container(deployment)
        assert not any("secretRef" in source for source in container.get("envFrom", [])), name
        for var in container.get("env", []):
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if CREDENTIALS.search(var["name"]):
                assert ref is not None and "value" not in var, f"{name}: {var['name']} is not from a Secret"
            if ref is not None:
                assert ref["name"] == SECRET and ref["key"] == var["name"]
                given.setdefault(name, set()).add(var["name"])
    urls = {"TANDEM_BROKER_URL", "TANDEM_RESULT_BACKEND", "TANDEM_REDIS_URL"}
    assert given["tandem-thinker"] == urls | {"TANDEM_THINKER_API_KEY", "TANDEM_SECRETS_KEY"}
    assert given["tandem-actor"] == urls | {"TANDEM_ACTOR_API_KEY", "TANDEM_SECRETS_KEY"}
    assert given["tandem-tools"] == urls | {"TANDEM_SECRETS_KEY"}  # tool code sees no model key
    assert given["tandem-api"] == urls | {"TANDEM_API_TOKENS", "TANDEM_SECRETS_KEY"}
    assert given["tandem-flower"] == urls | {"FLOWER_BASIC_AUTH"}


def test_the_configmap_names_only_settings_tandem_reads(overlay: tuple[str, Objects]) -> None:
    name, objects = overlay
    source = "".join((ROOT / "broker_config" / f).read_text() for f in ("settings.py", "api_settings.py"))
    for key in _config(objects):
        if key.startswith("TANDEM_"):
            role_free = re.sub(r"^TANDEM_(THINKER|ACTOR)_", "", key)
            assert f'"{key}"' in source or f'f"{{p}}{role_free}"' in source, key
    quorum = _config(objects).get("TANDEM_RABBITMQ_QUEUE_TYPE")
    assert quorum == ("quorum" if name == "rabbitmq-quorum" else None)


def test_each_role_scales_on_its_queue_with_keda(overlay: tuple[str, Objects]) -> None:
    name, objects = overlay
    deployments = _of(objects, "Deployment")
    scaled = _of(objects, "ScaledObject")
    auths = _of(objects, "TriggerAuthentication")
    targets = []
    for obj in scaled.values():
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        spec = obj["spec"]
        assert set(spec) <= {
            "scaleTargetRef",
            "minReplicaCount",
            "maxReplicaCount",
            "pollingInterval",
            "cooldownPeriod",
            "advanced",
            "triggers",
            "fallback",
            "idleReplicaCount",
        }
        ref = spec["scaleTargetRef"]
        assert ref.get("kind", "Deployment") == "Deployment" and ref["name"] in deployments
        role = WORKERS[ref["name"]]
        targets.append(ref["name"])
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        [trigger] = spec["triggers"]
        assert trigger["type"] == TRIGGERS[name]
        meta = trigger["metadata"]
        assert all(isinstance(v, str) for v in meta.values())  # KEDA's metadata is strings
        if trigger["type"] == "prometheus":
            assert set(meta) == {"serverAddress", "query", "threshold"}
            assert urlparse(meta["serverAddress"]).scheme in ("http", "https")
            assert int(meta["threshold"]) == _threads(deployments[ref["name"]])
            query = meta["query"]
            depth_name = next(QueueDepthCollector(dict).describe()).name
            assert f'{depth_name}{{queue="{role}"}}' in query
            assert f"{STEPS_RUNNING.describe()[0].name}{{task" in query
            tasks = set(re.search(r'task=~?"([^"]+)"', query).group(1).split("|"))  # type: ignore[union-attr]
            assert tasks == {t for t, q in TASK_QUEUES.items() if q == role}
        else:
            assert meta["queueName"] == role and meta["mode"] == "QueueLength"
            assert meta["protocol"] == "http"  # counts the unacknowledged (running) steps too
            assert int(meta["value"]) == _threads(deployments[ref["name"]])
            auth = auths[trigger["authenticationRef"]["name"]]
            assert auth["apiVersion"] == "keda.sh/v1alpha1"
            [secret] = auth["spec"]["secretTargetRef"]
            assert secret["parameter"] == "host" and secret["name"] != SECRET
    assert sorted(targets) == sorted(WORKERS), "each worker Deployment has one ScaledObject"


def test_the_guides_own_overlay_renders(tmp_path: Path) -> None:
    """docs/kubernetes.md's example overlay, as written, on top of ``rabbitmq-quorum``."""
    guide = (ROOT / "docs" / "kubernetes.md").read_text()
    [example] = [
        b
        for b in re.findall(r"```yaml\n(.*?)```", guide, re.S)
        if "kind: Kustomization" in b and "rabbitmq-quorum" in b
    ]
    relative = "../deploy/kubernetes/overlays/rabbitmq-quorum"
    assert relative in example
    target = os.path.relpath(
        KUSTOMIZE / "overlays" / "rabbitmq-quorum", tmp_path
    )  # kustomize wants it relative
    (tmp_path / "kustomization.yaml").write_text(example.replace(relative, target))
    objects = _render(tmp_path)
    assert {o["metadata"].get("namespace") for o in objects} == {"tandem"}
    deployments = _of(objects, "Deployment")
    assert {_container(d)["image"] for d in deployments.values()} == {"registry.example.com/tandem:0.2.0"}
    config = _config(objects)
    settings = Settings.from_env({**config, "TANDEM_BROKER_URL": "amqp://u:p@rabbitmq:5672/tandem"})
    assert settings.rabbitmq_queue_type == "quorum" and settings.thinker.model == "hosted_vllm/Qwen3-32B"
    assert settings.metrics_port == 9808  # the base's settings are kept under the merged ones
    for obj in objects:
        if not obj["apiVersion"].startswith("keda.sh/"):
            kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)


def test_the_api_as_the_client_user_renders(tmp_path: Path) -> None:
    """docs/kubernetes.md's patch that gives the API the client user of docs/security.md (its
    three URLs from the Secret's ``TANDEM_CLIENT_*`` keys), on ``redis-broker``: the workers keep
    theirs, and the API's readiness probe is still ``tandem health``."""
    guide = (ROOT / "docs" / "kubernetes.md").read_text()
    [patch] = [b for b in re.findall(r"```yaml\n(.*?)```", guide, re.S) if "the API as the client user" in b]
    overlay = os.path.relpath(KUSTOMIZE / "overlays" / "redis-broker", tmp_path)
    head = f"apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {overlay}\n"
    (tmp_path / "kustomization.yaml").write_text(head + patch)
    objects = _render(tmp_path)
    urls = ("TANDEM_BROKER_URL", "TANDEM_RESULT_BACKEND", "TANDEM_REDIS_URL")
    for name, deployment in _of(objects, "Deployment").items():
        refs = {
            var["name"]: var["valueFrom"]["secretKeyRef"]
            for var in _container(deployment)["env"]
            if "secretKeyRef" in var.get("valueFrom", {})
        }
        client = name == "tandem-api"
        for url in urls:
            assert refs[url] == {"name": SECRET, "key": f"TANDEM_CLIENT_{url[7:]}" if client else url}, name
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)
    api = _container(_of(objects, "Deployment")["tandem-api"])
    assert api["readinessProbe"]["exec"]["command"][:2] == ["tandem", "health"]
    assert "TANDEM_API_TOKENS" in {var["name"] for var in api["env"]}  # the rest of its env is kept
