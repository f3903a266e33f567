"""What the pods of ``deploy/kubernetes`` may do: write, call the Kubernetes API, reach and be reached.

- every container's root file system is read-only, with an emptyDir on ``/tmp`` for tandem's
  containers (where a prefork pool's metrics files and tools' scratch files go;
  tests/integration/test_image.py runs the image's worker on such a root);
- no pod mounts a service-account token (none calls the Kubernetes API; the tools workers run
  users' code) and none gets the Services' environment variables;
- the NetworkPolicies, read as Kubernetes reads them (``tests/network_policy.py``), let each pod
  reach DNS, Redis and the broker, the model roles their hosts, Prometheus the workers' metrics and
  anyone the API; and nothing else: not the tools workers to the internet, not anyone to Flower;
  and docs/kubernetes.md's examples of opening and narrowing them do what the page says.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import kustomize
from tests.kustomize import KUSTOMIZE, Objects, container, of, pod_spec, workloads
from tests.network_policy import Pod, allows

RENDERED = ("redis-broker", "rabbitmq-quorum", "quickstart")
ROLES = ("thinker", "actor", "tools")


@pytest.fixture(scope="module", params=RENDERED)
def objects(request: pytest.FixtureRequest) -> Objects:
    return kustomize.render(KUSTOMIZE / "overlays" / request.param)


def _pod(workload: dict[str, Any], namespace: str = "tandem") -> Pod:
    labels = dict(workload["spec"]["template"]["metadata"]["labels"])
    ports = {
        p["name"]: p["containerPort"] for c in pod_spec(workload)["containers"] for p in c.get("ports", [])
    }
    return Pod(labels, ports, namespace)


def _is_tandem(workload: dict[str, Any]) -> bool:
    return workload["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/name") == "tandem"


def test_every_container_has_a_read_only_root_and_tandems_write_only_to_tmp(objects: Objects) -> None:
    found = workloads(objects)
    assert len([w for w in found.values() if _is_tandem(w)]) == 5
    for name, workload in found.items():
        spec = pod_spec(workload)
        for box in [*spec["containers"], *spec.get("initContainers", [])]:
            context = box["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, f"{name}/{box['name']}"
            assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
        if not _is_tandem(workload):
            continue
        volumes = {v["name"]: v for v in spec["volumes"]}
        [tmp] = [m for m in container(workload)["volumeMounts"] if m["mountPath"] == "/tmp"]
        assert "emptyDir" in volumes[tmp["name"]], name
        env = {e["name"] for e in container(workload).get("env", [])}
        assert "PROMETHEUS_MULTIPROC_DIR" not in env  # unset: a prefork pool makes its own under /tmp


def test_no_pod_mounts_a_service_account_token_or_gets_the_services_variables(objects: Objects) -> None:
    for name, workload in workloads(objects).items():
        spec = pod_spec(workload)
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["enableServiceLinks"] is False, name  # a Service "tandem-redis" would set TANDEM_REDIS_*
        assert "serviceAccountName" not in spec, name


def _fleet(objects: Objects) -> dict[str, Pod]:
    return {name.removeprefix("tandem-"): _pod(w) for name, w in of(objects, "Deployment").items()}


def test_each_pod_reaches_dns_and_the_datastores_and_only_the_model_roles_reach_model_hosts(
    objects: Objects,
) -> None:
    policies = list(of(objects, "NetworkPolicy").values())
    fleet = _fleet(objects)
    assert set(fleet) == {*ROLES, "api", "flower"}
    for name, pod in fleet.items():
        assert allows(policies, pod, None, 53, "UDP") and allows(policies, pod, None, 53, "TCP"), name
        for port in (6379, 26379, 5672, 5671):  # Redis, Sentinel, AMQP, AMQPS
            assert allows(policies, pod, None, port), f"{name} cannot reach port {port}"
        for port in (22, 80, 8080, 9808, 15672):
            assert not allows(policies, pod, None, port), f"{name} reaches port {port} outside"
        model_host = name in ("thinker", "actor")
        for port in (443, 8000):
            assert allows(policies, pod, None, port) == model_host, f"{name} and port {port}"


def test_the_api_is_reachable_from_anywhere_flower_from_nowhere_and_metrics_from_the_cluster(
    objects: Objects,
) -> None:
    policies = list(of(objects, "NetworkPolicy").values())
    fleet = _fleet(objects)
    caller = Pod({"app": "shop"}, namespace="shop")
    prometheus = Pod({"app.kubernetes.io/name": "prometheus"}, namespace="monitoring")
    assert allows(policies, caller, fleet["api"], fleet["api"].ports["http"])
    assert allows(policies, None, fleet["api"], fleet["api"].ports["http"])  # an ingress controller's node
    assert not allows(policies, caller, fleet["flower"], fleet["flower"].ports["http"])
    for role in ROLES:
        metrics = fleet[role].ports["metrics"]
        assert allows(policies, prometheus, fleet[role], metrics), role
        assert not allows(policies, None, fleet[role], metrics), f"{role}'s metrics from outside the cluster"
        assert not allows(policies, prometheus, fleet[role], 8000), role
    assert not allows(policies, fleet["tools"], fleet["api"], fleet["api"].ports["http"])  # no egress on 8000


def test_the_quick_starts_redis_takes_tandems_pods_only_and_reaches_nothing() -> None:
    objects = kustomize.render(KUSTOMIZE / "overlays" / "quickstart")
    policies = list(of(objects, "NetworkPolicy").values())
    redis = _pod(of(objects, "StatefulSet")["tandem-redis"])
    port = redis.ports["redis"]
    for name, pod in _fleet(objects).items():
        assert allows(policies, pod, redis, port), f"{name} cannot reach the quick start's Redis"
    assert not allows(policies, Pod({"app": "shop"}), redis, port)
    assert not allows(policies, Pod({"app": "shop"}, namespace="shop"), redis, port)
    assert not allows(policies, redis, None, 443) and not allows(policies, redis, None, 53, "UDP")


def test_the_policy_reader_isolates_and_adds_as_kubernetes_does() -> None:
    """The reader itself, on policies written here: no policy lets all through; an isolating one
    without rules lets nothing; a second policy adds to the first; a named port is the target's."""
    web = Pod({"app": "web"}, {"http": 8080})
    deny = {"metadata": {"name": "deny"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    http_in = {
        "metadata": {"name": "http"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "x"}}}],
                    "ports": [{"port": "http"}],
                }
            ],
        },
    }
    assert allows([], None, web, 1)
    assert not allows([deny], None, web, 8080)
    assert allows([deny, http_in], Pod({}, namespace="x"), web, 8080)  # the second policy adds
    assert not allows([deny, http_in], Pod({}), web, 8080)  # a caller in web's namespace: no egress
    assert allows([http_in], Pod({}, namespace="x"), web, 8080)
    assert not allows([http_in], Pod({}, namespace="y"), web, 8080)
    assert not allows([http_in], Pod({}, namespace="x"), web, 8081)


def test_the_guides_opening_and_narrowing_examples_do_what_it_says(tmp_path: Path) -> None:
    """docs/kubernetes.md's two examples, as written, in an overlay on ``redis-broker``: the OTLP
    policy opens port 4318 to the namespace ``monitoring`` for every pod; the patch leaves the model
    roles only the vLLM servers of the namespace ``llm``."""
    guide = (KUSTOMIZE.parent.parent / "docs" / "kubernetes.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", guide, re.S)
    [policy] = [b for b in blocks if "name: tandem-otlp" in b]
    [patch] = [b for b in blocks if "name: tandem-model-hosts" in b]
    mine = tmp_path / "my-tandem"
    mine.mkdir()
    (mine / "collector-egress.yaml").write_text(policy)
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [
            os.path.relpath(KUSTOMIZE / "overlays" / "redis-broker", mine),
            "collector-egress.yaml",
        ],
        **yaml.safe_load(patch),
    }
    (mine / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    objects = kustomize.render(mine)
    policies = list(of(objects, "NetworkPolicy").values())
    fleet = _fleet(objects)
    collector = Pod({"app": "otel-collector"}, namespace="monitoring")
    vllm = Pod({"app": "vllm"}, namespace="llm")
    for name, pod in fleet.items():
        assert allows(policies, pod, collector, 4318), name
        assert not allows(policies, pod, None, 4318), name  # only in that namespace
        model_role = name in ("thinker", "actor")
        assert allows(policies, pod, vllm, 8000) == model_role, name
        assert not allows(policies, pod, None, 443), name  # narrowed: no hosted API any more
