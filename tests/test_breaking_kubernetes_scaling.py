"""Breaking tests of docs/kubernetes.md's scaling and monitoring: what KEDA scales each role on,
what the Prometheus Operator's objects select and alert on, and the bound on one model call that
the grace periods are derived from. Written from the docs alone; the renderings and the cluster's
rules are in ``tests/breaking_k8s.py``."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from tandem.broker_config import Settings
from tests.breaking_k8s import (
    DOCS,
    KEDA,
    PROMETHEUS,
    REPO,
    ROLES,
    THREADS,
    anchors,
    command_option,
    connects,
    containers,
    doc_links,
    documented_metrics,
    documented_variables,
    env_of,
    named,
    namespace_of,
    of_kind,
    pod_end,
    pod_labels,
    port_number,
    render,
    role_deployment,
    selects,
    workloads,
)

# -- what scales on what (KEDA) ---------------------------------------------------------------------


def _routed() -> dict[str, set[str]]:
    """The tasks the Celery app routes to each role's queue."""
    from tandem.tasks.app import create_app

    app = create_app(Settings.from_env({}))
    routes: dict[str, set[str]] = {}
    for task, route in app.conf.task_routes.items():
        routes.setdefault(route["queue"], set()).add(task)
    return routes


@pytest.mark.parametrize("name", KEDA)
def test_each_scaled_object_scales_its_role_on_its_queue_by_its_threads(name: str) -> None:
    objs = render(name)
    scaled = {o["spec"]["scaleTargetRef"]["name"]: o for o in of_kind(objs, "ScaledObject")}
    assert set(scaled) == {f"tandem-{r}" for r in ROLES}, f"{name}: ScaledObjects target {sorted(scaled)}"
    routed = _routed()
    for role in ROLES:
        so, deployment = scaled[f"tandem-{role}"], role_deployment(objs, role)
        threads = int(command_option(containers(deployment)[0], "--concurrency"))
        assert threads == THREADS[role], f"{name}: {role} runs {threads} threads"
        spec = so["spec"]
        assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 10 if role == "tools" else 20)
        assert spec["cooldownPeriod"] == 300
        assert (
            spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
                "stabilizationWindowSeconds"
            ]
            == 300
        )
        (trigger,) = spec["triggers"]
        meta = trigger["metadata"]
        if trigger["type"] == "prometheus":
            assert int(meta["threshold"]) == threads, f"{name}: {role}'s target is {meta['threshold']}"
            query = meta["query"]
            assert f'tandem_queue_depth{{queue="{role}"}}' in query, query
            (selector,) = re.findall(r'tandem_steps_running\{task=~?"([^"]+)"\}', query)
            counted = {t for t in routed[role] if re.fullmatch(selector, t)}
            others = {t for q, ts in routed.items() if q != role for t in ts if re.fullmatch(selector, t)}
            assert counted == routed[role] and not others, (
                f"{name}: {role}'s query counts {counted | others}, routed {routed[role]}"
            )
        else:
            assert trigger["type"] == "rabbitmq", trigger
            assert (meta["queueName"], meta["protocol"], meta["mode"], int(meta["value"])) == (
                role,
                "http",
                "QueueLength",
                threads,
            )
            auth = named(objs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
            assert auth["spec"]["secretTargetRef"] == [
                {"parameter": "host", "name": "tandem-rabbitmq-management", "key": "host"}
            ]


def test_the_scaled_deployments_leave_their_replica_count_to_keda() -> None:
    """docs/kubernetes.md: KEDA "owns each role's replica count through a ScaledObject", and a
    changed setting is deployed with ``kubectl apply -k``. A Deployment that states ``replicas``
    is scaled back to it at every apply (Kubernetes' docs, "Migrating Deployments and
    StatefulSets to horizontal autoscaling": remove ``spec.replicas`` from the manifests), so a
    config change in the middle of a backlog drops every role to one pod."""
    stated: dict[str, dict[str, int]] = {}
    for name in KEDA:
        objs = render(name)
        for so in of_kind(objs, "ScaledObject"):
            target = named(objs, "Deployment", so["spec"]["scaleTargetRef"]["name"])
            if "replicas" in target["spec"]:
                stated.setdefault(name, {})[target["metadata"]["name"]] = target["spec"]["replicas"]
    assert not stated, f"autoscaled Deployments state replicas, which each kubectl apply -k resets: {stated}"


def _promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.fail("promtool is not installed (apt-get install prometheus)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("name", ["redis-broker", "prometheus-operator", "narrowed"])
def test_the_autoscalers_queries_are_promql_on_exported_metrics(name: str, tmp_path: Path) -> None:
    queries = [so["spec"]["triggers"][0]["metadata"]["query"] for so in of_kind(render(name), "ScaledObject")]
    rules = {
        "groups": [
            {"name": "keda", "rules": [{"record": f"keda:q{i}", "expr": q} for i, q in enumerate(queries)]}
        ]
    }
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(rules))
    done = _promtool("check", "rules", "q.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    unknown = {m for q in queries for m in re.findall(r"\btandem_[a-z_]+", q)} - documented_metrics()
    assert not unknown, f"the autoscalers read {unknown}, which no worker exports (docs/scaling.md)"


# -- Prometheus Operator ---------------------------------------------------------------------------


def test_the_service_monitor_scrapes_exactly_the_workers_metrics_ports() -> None:
    objs = render("prometheus-operator")
    (monitor,) = of_kind(objs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert named(objs, "PrometheusRule", "tandem")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert "namespaceSelector" not in spec or spec["namespaceSelector"].get("matchNames") == [
        namespace_of(monitor)
    ]
    chosen = [
        s
        for s in of_kind(objs, "Service")
        if namespace_of(s) == namespace_of(monitor)
        and selects(spec["selector"], s["metadata"].get("labels", {}))
    ]
    assert sorted(s["metadata"]["name"] for s in chosen) == [
        f"tandem-{r}-metrics" for r in ("actor", "thinker", "tools")
    ]
    (endpoint,) = spec["endpoints"]
    assert (endpoint["path"], endpoint["interval"]) == ("/metrics", "15s")
    for svc in chosen:
        role = svc["metadata"]["labels"][spec["jobLabel"]]
        assert role in ROLES and svc["metadata"]["name"] == f"tandem-{role}-metrics", (
            "the job label is not the role"
        )
        (port,) = [p for p in svc["spec"]["ports"] if p.get("name") == endpoint["port"]]
        deployment = role_deployment(objs, role)
        assert [
            w for w in workloads(objs) if selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(w))
        ] == [deployment]
        metrics_port = int(env_of(objs, deployment, containers(deployment)[0])["TANDEM_METRICS_PORT"])
        assert port_number(containers(deployment)[0], port["targetPort"]) == metrics_port
        assert connects(objs, PROMETHEUS, pod_end(deployment), metrics_port), "Prometheus cannot scrape"


def test_the_prometheus_rule_is_the_alert_file_and_promtool_passes_it(tmp_path: Path) -> None:
    rule = named(render("prometheus-operator"), "PrometheusRule", "tandem")
    alerts = yaml.safe_load((REPO / "deploy" / "monitoring" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"], "the PrometheusRule's groups differ from alerts.yaml"
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    shutil.copy(REPO / "deploy" / "monitoring" / "alerts.test.yaml", tmp_path / "alerts.test.yaml")
    for args in (("check", "rules", "alerts.yaml"), ("test", "rules", "alerts.test.yaml")):
        done = _promtool(*args, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    used = {
        m
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        for m in re.findall(r"\btandem_[a-z_]+", r["expr"])
    }
    assert used <= documented_metrics(), (
        f"the rules read {used - documented_metrics()}, which no worker exports"
    )


def test_the_alerts_advice_names_only_variables_tandem_reads() -> None:
    """An alert tells the operator what to change; a variable it names must be one tandem reads."""
    names, families = documented_variables()
    rule = named(render("prometheus-operator"), "PrometheusRule", "tandem")
    advice = {
        (r["alert"], var)
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        for text in r.get("annotations", {}).values()
        for var in re.findall(r"\bTANDEM_[A-Z0-9_]+", text)
    }
    unknown = sorted(
        (alert, var) for alert, var in advice if var not in names and not var.startswith(families)
    )
    assert not unknown, (
        f"alerts advise setting variables tandem does not read (docs/configuration.md): {unknown}"
    )


def test_every_docs_anchor_the_deploy_files_name_exists() -> None:
    files = [REPO / "Dockerfile", REPO / "docker-compose.yml", *(REPO / "deploy").rglob("*.yaml")]
    broken = sorted(
        f"{f.relative_to(REPO)} -> docs/{page}#{anchor}"
        for f in files
        for page, anchor in doc_links(f.read_text())
        if not (DOCS / page).exists() or anchor not in anchors(DOCS / page)
    )
    assert not broken, f"links to sections that do not exist: {broken}"


# -- the calls' bound the grace periods are derived from -------------------------------------------


def test_a_model_call_ends_within_its_timeout_every_retry_included() -> None:
    """docs/kubernetes.md, Grace periods: the Thinker's call "ends within TANDEM_THINKER_TIMEOUT:
    one model call, every retry of it included", so 120 s + 30 s covers a step at SIGTERM. A host
    that accepts and never answers is the case the bound is for: the worker's own model (built from
    the settings as a worker builds it) must give up within the timeout, not once per attempt."""
    from tandem.tasks.runtime import Runtime

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    arrivals: list[float] = []
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            arrivals.append(time.monotonic())
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    timeout = 3.0
    env = {
        "TANDEM_THINKER_MODEL": "hosted_vllm/hung",
        "TANDEM_THINKER_API_BASE": f"http://127.0.0.1:{server.getsockname()[1]}/v1",
        "TANDEM_THINKER_TIMEOUT": str(timeout),
    }
    model = Runtime(Settings.from_env(env)).model("thinker")
    started = time.monotonic()
    try:
        with pytest.raises(Exception):  # noqa: B017 - any failure: the point is when it comes
            model.generate("You think.", [{"role": "user", "content": "hello"}])
        took = time.monotonic() - started
    finally:
        server.close()
        for conn in held:
            conn.close()
    # Twice the timeout is slack for a loaded machine; once per attempt it is 5 x the timeout.
    assert took < 2 * timeout, (
        f"the call took {took:.1f} s over {len(arrivals)} requests with TANDEM_THINKER_TIMEOUT={timeout:g}: "
        f"the timeout bounds one attempt, so at 120 s a hung host holds a step about "
        f"{len(arrivals) * 120} s, past the 150 s grace period derived from it"
    )
