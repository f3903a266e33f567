"""The quick start, the two components and the API's names in ``deploy/kubernetes``.

- ``overlays/quickstart``: one Redis StatefulSet behind a headless Service; the Secret it makes
  holds every key a pod reads, and its URLs name that Service; no KEDA object, so it applies on a
  fresh cluster; everything in the namespace it creates.
- ``components/ingress``: the Ingress routes to the API's Service and port, and every host it
  serves is one the API answers to (``TANDEM_API_ALLOWED_HOSTS``, read by ``tandem api``'s own
  ``Host`` check); callers in another namespace use the Service's ``.svc`` names.
- ``components/prometheus-operator``: kubernetes-validate knows no CRDs, so the ServiceMonitor and
  the PrometheusRule are checked against the fields of their CRDs (``monitoring.coreos.com/v1``): the
  ServiceMonitor selects exactly the workers' metrics Services by their labels and names their
  port; the PrometheusRule holds deploy/monitoring/alerts.yaml's groups, which promtool accepts.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from tandem.broker_config import Settings
from tandem.broker_config.api_settings import ApiSettings
from tandem.workers.api.host_header import AllowedHosts, host_allowed
from tests import kustomize
from tests.kustomize import COMPONENTS, KUSTOMIZE, OVERLAYS, Objects, config, container, of
from tests.network_policy import selects
from tests.test_monitoring import MONITORING, _promtool

VERSION = kubernetes_validate.latest_version()
ROLES = ("thinker", "actor", "tools")
MONITORING_API = "monitoring.coreos.com/v1"
SERVICE_MONITOR_FIELDS = {
    "jobLabel", "targetLabels", "podTargetLabels", "endpoints", "selector", "namespaceSelector",
    "sampleLimit", "targetLimit", "labelLimit", "labelNameLengthLimit", "labelValueLengthLimit",
    "attachMetadata", "scrapeProtocols", "bodySizeLimit", "keepDroppedTargets", "selectorMechanism",
}  # fmt: skip
"""The fields of a ServiceMonitor's ``spec`` (its CRD, ``monitoring.coreos.com/v1``)."""
ENDPOINT_FIELDS = {
    "port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout", "honorLabels",
    "honorTimestamps", "trackTimestampsStaleness", "relabelings", "metricRelabelings", "tlsConfig",
    "authorization", "basicAuth", "oauth2", "bearerTokenSecret", "followRedirects", "enableHttp2",
    "filterRunning", "proxyUrl",
}  # fmt: skip
"""The fields of one of its ``endpoints``."""
RULE_FIELDS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
GROUP_FIELDS = {"name", "interval", "rules", "limit", "partial_response_strategy", "query_offset", "labels"}


def _validate(objects: Objects) -> None:
    for obj in objects:
        if not obj["apiVersion"].startswith(("keda.sh/", "monitoring.coreos.com/")):
            kubernetes_validate.validate(obj, VERSION, strict=True)


# --- the quick start -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quickstart() -> Objects:
    return kustomize.render(OVERLAYS / "quickstart")


def test_the_quick_start_applies_on_a_fresh_cluster_in_its_own_namespace(quickstart: Objects) -> None:
    groups = {o["apiVersion"].rpartition("/")[0] for o in quickstart}
    assert groups <= {"", "apps", "policy", "networking.k8s.io"}, groups  # no KEDA, no operator: no CRD
    assert list(of(quickstart, "Namespace")) == ["tandem"]
    assert quickstart[0]["kind"] == "Namespace"  # kustomize puts it first, so it exists in time
    namespaced = [o for o in quickstart if o["kind"] != "Namespace"]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"tandem"}
    _validate(quickstart)


def test_the_quick_starts_redis_is_one_persistent_statefulset_behind_its_headless_service(
    quickstart: Objects,
) -> None:
    [redis] = of(quickstart, "StatefulSet").values()
    assert redis["spec"]["replicas"] == 1
    service = of(quickstart, "Service")[redis["spec"]["serviceName"]]
    assert service["spec"]["clusterIP"] == "None"
    labels = redis["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert selects(redis["spec"]["selector"], labels)
    box = container(redis)
    assert box["command"][:3] == ["redis-server", "--appendonly", "yes"]  # docs/durability.md
    [data] = redis["spec"]["volumeClaimTemplates"]
    assert {m["name"]: m["mountPath"] for m in box["volumeMounts"]} == {data["metadata"]["name"]: "/data"}
    ports = {p["name"]: p["containerPort"] for p in box["ports"]}
    [port] = service["spec"]["ports"]
    assert ports[port["targetPort"]] == 6379


def test_the_quick_starts_secret_holds_every_key_a_pod_reads_and_names_its_redis(quickstart: Objects) -> None:
    [secret] = of(quickstart, "Secret").values()
    assert secret["metadata"]["name"] == "tandem-secrets"
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    for name, deployment in of(quickstart, "Deployment").items():
        for var in container(deployment).get("env", []):
            ref = var.get("valueFrom", {}).get("secretKeyRef")
            if ref is not None and not ref.get("optional"):
                assert ref["name"] == "tandem-secrets" and ref["key"] in values, f"{name}: {ref['key']}"
    [redis] = of(quickstart, "StatefulSet").values()
    service = of(quickstart, "Service")[redis["spec"]["serviceName"]]
    url = f"redis://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/0"
    assert {values[k] for k in ("TANDEM_BROKER_URL", "TANDEM_RESULT_BACKEND", "TANDEM_REDIS_URL")} == {url}
    settings = Settings.from_env({**config(quickstart), **values})  # tandem reads it as it stands
    assert settings.broker_url == url and settings.api_tokens
    requests = [container(d)["resources"]["requests"]["cpu"] for d in of(quickstart, "Deployment").values()]
    assert set(requests) == {"100m"}  # fits a laptop's cluster
    tandem = [container(d) for d in of(quickstart, "Deployment").values()]
    assert {(c["image"], c["imagePullPolicy"]) for c in tandem} == {("tandem:latest", "IfNotPresent")}


# --- the Ingress and the API's names -------------------------------------------------------------


def _answers(allowed: tuple[str, ...], host: str) -> tuple[int, str]:
    """What ``tandem api``'s ``Host`` check answers a request for ``/v1/jobs`` naming ``host``."""

    async def ok(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app = AllowedHosts(Starlette(routes=[Route("/v1/jobs", ok)]), allowed)
    reply = TestClient(app).get("/v1/jobs", headers={"host": host})
    return reply.status_code, reply.text


def test_callers_in_any_namespace_use_the_services_svc_names_and_others_get_400() -> None:
    allowed = ApiSettings.from_env(config(kustomize.render(KUSTOMIZE / "base"))).allowed_hosts
    for host in (
        "tandem-api:8000",  # the Service, from its own namespace
        "tandem-api.tandem.svc:8000",  # from another namespace
        "tandem-api.tandem.svc.cluster.local:8000",
        "localhost:8000",  # kubectl port-forward
        "127.0.0.1:8000",
    ):
        assert _answers(allowed, host)[0] == 200, host
    status, body = _answers(allowed, "tandem-api.tandem:8000")  # <service>.<namespace>: not listed
    assert status == 400 and "host_not_allowed" in body and "TANDEM_API_ALLOWED_HOSTS" in body


def test_the_ingress_routes_to_the_api_and_its_hosts_are_allowed(tmp_path: Path) -> None:
    objects = kustomize.render_with(
        tmp_path / "mine", OVERLAYS / "redis-broker", COMPONENTS / "ingress", namespace="tandem"
    )
    _validate(objects)
    [ingress] = of(objects, "Ingress").values()
    service = of(objects, "Service")["tandem-api"]
    api = of(objects, "Deployment")["tandem-api"]
    hosts = [rule["host"] for rule in ingress["spec"]["rules"]]
    assert sorted(h for t in ingress["spec"]["tls"] for h in t["hosts"]) == sorted(hosts)
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == "tandem-api"
            [port] = [p for p in service["spec"]["ports"] if p["name"] == backend["port"]["name"]]
            assert port["targetPort"] in {p["name"] for p in container(api)["ports"]}
    allowed = ApiSettings.from_env(config(objects)).allowed_hosts
    for host in hosts:
        assert host_allowed(host, allowed), f"the API would answer the Ingress's {host} with 400"
    base = ApiSettings.from_env(config(kustomize.render(KUSTOMIZE / "base"))).allowed_hosts
    assert set(base) <= set(allowed), "the component keeps the base's in-cluster names"


def test_the_guides_ingress_overlay_renders_with_a_copy_of_the_component(tmp_path: Path) -> None:
    """docs/kubernetes.md's Ingress example, as written, beside a copy of ``components/ingress``."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "kubernetes.md").read_text()
    [example] = [b for b in re.findall(r"```yaml\n(.*?)```", guide, re.S) if "components:\n  - ingress" in b]
    mine = tmp_path / "my-tandem"
    shutil.copytree(COMPONENTS / "ingress", mine / "ingress")
    relative = "../deploy/kubernetes/overlays/redis-broker"
    assert relative in example
    target = os.path.relpath(OVERLAYS / "redis-broker", mine)  # kustomize wants it relative
    (mine / "kustomization.yaml").write_text(example.replace(relative, target))
    objects = kustomize.render(mine)
    assert list(of(objects, "Ingress")) == ["tandem-api"]
    assert {o["metadata"].get("namespace") for o in objects} == {"tandem"}
    _validate(objects)


# --- the Prometheus Operator's objects ---------------------------------------------------------------


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Objects:
    return kustomize.render_with(
        tmp_path_factory.mktemp("mine"), OVERLAYS / "redis-broker", COMPONENTS / "prometheus-operator"
    )


def test_the_base_and_the_overlays_need_no_operator_crd() -> None:
    for path in (
        KUSTOMIZE / "base",
        *(OVERLAYS / n for n in ("redis-broker", "rabbitmq-quorum", "quickstart")),
    ):
        assert not [o for o in kustomize.render(path) if o["apiVersion"] == MONITORING_API], path


def test_the_service_monitor_scrapes_exactly_the_workers_metrics_ports(monitored: Objects) -> None:
    _validate(monitored)  # the metrics Services are Kubernetes' own objects
    [monitor] = of(monitored, "ServiceMonitor").values()
    assert monitor["apiVersion"] == MONITORING_API
    spec = monitor["spec"]
    assert set(spec) <= SERVICE_MONITOR_FIELDS and spec["endpoints"]
    chosen = {
        n: s
        for n, s in of(monitored, "Service").items()
        if selects(spec["selector"], s["metadata"]["labels"])
    }
    deployments = of(monitored, "Deployment")
    scraped = set()
    for name, service in chosen.items():
        port_names = {p["name"] for p in service["spec"]["ports"]}
        for endpoint in spec["endpoints"]:
            assert set(endpoint) <= ENDPOINT_FIELDS
            assert endpoint["port"] in port_names, f"{name} has no port named {endpoint['port']}"
            assert endpoint.get("path", "/metrics") == "/metrics"
        [target] = [
            d for d in deployments.values()
            if service["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]  # fmt: skip
        [port] = service["spec"]["ports"]
        assert port["targetPort"] in {p["name"] for p in container(target)["ports"]}
        scraped.add(target["metadata"]["name"])
        assert service["metadata"]["labels"][spec["jobLabel"]] in ROLES
    assert scraped == {f"tandem-{r}" for r in ROLES}


def test_the_prometheus_rule_is_the_alert_rules_file(monitored: Objects) -> None:
    [rule] = of(monitored, "PrometheusRule").values()
    assert rule["apiVersion"] == MONITORING_API
    assert set(rule["spec"]) == {"groups"}
    alerts = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"], (
        "the PrometheusRule's groups differ from deploy/monitoring/alerts.yaml's: copy that file's "
        "`groups:` on, indented under `spec:`, into components/prometheus-operator/prometheus-rule.yaml"
    )
    for group in rule["spec"]["groups"]:
        assert set(group) <= GROUP_FIELDS
        for entry in group["rules"]:
            assert set(entry) <= RULE_FIELDS and ("alert" in entry) != ("record" in entry)
            assert all(
                isinstance(v, str)
                for v in {**entry.get("labels", {}), **entry.get("annotations", {})}.values()
            )


def test_promtool_accepts_the_prometheus_rules_groups(monitored: Objects, tmp_path: Path) -> None:
    [rule] = of(monitored, "PrometheusRule").values()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    done = subprocess.run(
        [_promtool(), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
