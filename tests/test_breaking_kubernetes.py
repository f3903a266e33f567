"""Breaking tests of docs/kubernetes.md, docs/tracing.md (Compose, Kubernetes, the image),
docs/scaling.md (Docker), the Dockerfile and docker-compose.yml, written from the docs alone.

Every rendering the docs name is built as the docs build it (``kubectl kustomize`` of the repo's
base and overlays, and of the docs' own example overlays copied from their code blocks), then each
promise is checked the way the cluster would read it: label selectors, named ports, the pods'
environments, NetworkPolicies evaluated with Kubernetes' rules, the rules with promtool. The
processes themselves (the image's install line and command, read-only roots, the API's ``Host``
names) are in ``tests/integration/test_breaking_image.py``.
"""

from __future__ import annotations

import re

import pytest

from tandem.broker_config import Settings
from tests.breaking_k8s import (
    KUBERNETES_MD,
    NAMESPACE,
    PROMETHEUS,
    RENDERS,
    REPO,
    ROLES,
    End,
    command_option,
    connects,
    containers,
    docs_secret_file,
    documented_allow_list,
    documented_callers,
    documented_variables,
    env_of,
    is_tandem,
    named,
    namespace_of,
    of_kind,
    pod_end,
    pod_env,
    pod_labels,
    pod_spec,
    port_number,
    render,
    role_deployment,
    secret_keys,
    selects,
    workloads,
)

CORE_GROUPS = ("v1", "apps/v1", "policy/v1", "networking.k8s.io/v1")


# -- everything the docs render renders, and validates --------------------------------------------


@pytest.mark.parametrize("name", RENDERS)
def test_every_rendering_the_docs_name_validates_against_kubernetes(name: str) -> None:
    import kubernetes_validate

    objs = render(name)
    assert objs, f"{name} rendered nothing"
    for obj in objs:
        if obj["apiVersion"] not in CORE_GROUPS:
            continue
        for version in ("1.29", kubernetes_validate.latest_version()):
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(
                    f"{name}: {obj['kind']} {obj['metadata']['name']} is invalid for {version}: {exc}"
                )


@pytest.mark.parametrize("name", ["base", "quickstart", "quickstart-ingress"])
def test_the_base_and_the_quick_start_need_no_operator(name: str) -> None:
    foreign = [(o["apiVersion"], o["kind"]) for o in render(name) if o["apiVersion"] not in CORE_GROUPS]
    assert not foreign, f"{name} holds objects outside Kubernetes' own API: {foreign}"


# -- security context: read-only roots, /tmp on an emptyDir, no token ------------------------------


@pytest.mark.parametrize("name", RENDERS)
def test_every_container_is_read_only_unprivileged_and_has_no_token(name: str) -> None:
    for workload in workloads(render(name)):
        spec, who = pod_spec(workload), workload["metadata"]["name"]
        assert spec.get("automountServiceAccountToken") is False, (
            f"{name}: {who} mounts a service-account token"
        )
        assert spec.get("enableServiceLinks") is False, f"{name}: {who} gets the Services' variables"
        projected = [v for v in spec.get("volumes", []) if "projected" in v or "secret" in v]
        assert not projected, f"{name}: {who} mounts {projected}"
        pod_sc = spec.get("securityContext", {})
        for c in containers(workload):
            sc = {**pod_sc, **c.get("securityContext", {})}
            assert sc.get("readOnlyRootFilesystem") is True, f"{name}: {who}/{c['name']} has a writable root"
            assert sc.get("allowPrivilegeEscalation") is False, f"{name}: {who}/{c['name']}"
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], f"{name}: {who}/{c['name']}"
            assert sc.get("runAsNonRoot") is True, f"{name}: {who}/{c['name']}"
            assert sc.get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{name}: {who}/{c['name']}"
            if is_tandem(workload):
                assert (sc.get("runAsUser"), sc.get("runAsGroup")) == (1000, 1000), (
                    f"{name}: {who} not uid/gid 1000"
                )


TMP_SIZES = {"thinker": "512Mi", "actor": "512Mi", "tools": "1Gi", "api": "64Mi", "flower": "64Mi"}


@pytest.mark.parametrize("name", RENDERS)
def test_the_one_writable_path_of_each_tandem_pod_is_tmp_on_an_emptydir(name: str) -> None:
    for workload in filter(is_tandem, workloads(render(name))):
        role = pod_labels(workload)["app.kubernetes.io/component"]
        volumes = {v["name"]: v for v in pod_spec(workload).get("volumes", [])}
        for c in containers(workload):
            mounts = c.get("volumeMounts", [])
            assert [m["mountPath"] for m in mounts] == ["/tmp"], f"{name}: {role} writes to {mounts}"
            volume = volumes[mounts[0]["name"]]
            assert "emptyDir" in volume, f"{name}: {role}'s /tmp is {volume}, not an emptyDir"
            assert volume["emptyDir"].get("sizeLimit") == TMP_SIZES[role], f"{name}: {role}'s /tmp: {volume}"
            env = env_of(render(name), workload, c)
            assert "PROMETHEUS_MULTIPROC_DIR" not in env, f"{name}: {role} sets PROMETHEUS_MULTIPROC_DIR"


def test_the_image_runs_as_the_uid_the_manifests_name() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"useradd\b[^\n&]*--uid 1000 tandem", text), "the image's user tandem is not uid 1000"
    assert re.search(r"^USER tandem$", text, flags=re.M), "the image does not run as tandem"


# -- secrets: each pod its own keys, each key present in the quick start ------------------------


EXPECTED_KEYS = {
    "thinker": {
        "TANDEM_BROKER_URL",
        "TANDEM_RESULT_BACKEND",
        "TANDEM_REDIS_URL",
        "TANDEM_SECRETS_KEY",
        "TANDEM_THINKER_API_KEY",
    },
    "actor": {
        "TANDEM_BROKER_URL",
        "TANDEM_RESULT_BACKEND",
        "TANDEM_REDIS_URL",
        "TANDEM_SECRETS_KEY",
        "TANDEM_ACTOR_API_KEY",
    },
    "tools": {"TANDEM_BROKER_URL", "TANDEM_RESULT_BACKEND", "TANDEM_REDIS_URL", "TANDEM_SECRETS_KEY"},
    "api": {
        "TANDEM_BROKER_URL",
        "TANDEM_RESULT_BACKEND",
        "TANDEM_REDIS_URL",
        "TANDEM_SECRETS_KEY",
        "TANDEM_API_TOKENS",
    },
    "flower": {"TANDEM_BROKER_URL", "TANDEM_RESULT_BACKEND", "TANDEM_REDIS_URL", "FLOWER_BASIC_AUTH"},
}
OPTIONAL_KEYS = {"TANDEM_SECRETS_KEY", "TANDEM_THINKER_API_KEY", "TANDEM_ACTOR_API_KEY"}


@pytest.mark.parametrize("name", RENDERS)
def test_each_pod_reads_only_its_own_secret_keys(name: str) -> None:
    for workload in filter(is_tandem, workloads(render(name))):
        role = pod_labels(workload)["app.kubernetes.io/component"]
        keys = secret_keys(containers(workload)[0])
        secrets = {
            v["valueFrom"]["secretKeyRef"]["name"]
            for v in containers(workload)[0].get("env", [])
            if "secretKeyRef" in v.get("valueFrom", {})
        }
        assert secrets == {"tandem-secrets"}, f"{name}: {role} reads the Secrets {secrets}"
        assert set(keys) == EXPECTED_KEYS[role], f"{name}: {role} reads {sorted(keys)}"
        assert {k for k, optional in keys.items() if optional} == EXPECTED_KEYS[role] & OPTIONAL_KEYS, (
            f"{name}: {role}'s optional keys are {keys}"
        )
        configmaps = [o for o in render(name) if o["kind"] == "ConfigMap"]
        assert not any(
            re.search(r"(://[^/\s]*:[^@/\s]+@|API_KEY|TOKENS|BASIC_AUTH|SECRETS_KEY)", f"{k}={v}")
            for cm in configmaps
            for k, v in cm.get("data", {}).items()
        ), f"{name}: a credential sits in a ConfigMap"


def test_every_variable_the_manifests_set_is_in_the_configuration_reference() -> None:
    names, families = documented_variables()
    missing: dict[str, list[str]] = {}
    for name in RENDERS:
        objs = render(name)
        set_here = {k for cm in of_kind(objs, "ConfigMap") for k in cm.get("data", {})}
        set_here |= {
            k for s in of_kind(objs, "Secret") for k in {**s.get("data", {}), **s.get("stringData", {})}
        }
        set_here |= {
            v["name"]
            for w in filter(is_tandem, workloads(objs))
            for c in containers(w)
            for v in c.get("env", [])
        }
        set_here |= set(docs_secret_file())
        for var in sorted(n for n in set_here if n not in names and not n.startswith(families)):
            missing.setdefault(var, []).append(name)
    assert not missing, (
        f"the manifests set variables docs/configuration.md does not list (docs/kubernetes.md: 'every "
        f"variable is in the Configuration reference'): {missing}"
    )


@pytest.mark.parametrize("name", RENDERS)
def test_every_tandem_pods_environment_parses(name: str) -> None:
    objs = render(name)
    for workload in filter(is_tandem, workloads(objs)):
        env = env_of(objs, workload, containers(workload)[0])
        settings = Settings.from_env(env)  # a bad value stops the process: here it fails the test
        role = pod_labels(workload)["app.kubernetes.io/component"]
        if role in ("thinker", "actor", "tools", "api"):
            assert env["OTEL_SERVICE_NAME"] == f"tandem-{role}", (
                f"{name}: {role} names itself {env.get('OTEL_SERVICE_NAME')}"
            )
            assert settings.metrics_port == 9808 and settings.lease_seconds == 30
            assert settings.thinker.timeout == settings.actor.timeout == 120 and settings.tool_timeout == 60


# -- grace periods, probes, Services ---------------------------------------------------------------


def _grace_table() -> dict[str, tuple[str, int, int]]:
    rows = re.findall(
        r"^\| `(tandem-\w+)` \| `(TANDEM_\w+)`[^|]*\| (\d+) s \+ 30 s = (\d+) s \|",
        KUBERNETES_MD.read_text(),
        flags=re.M,
    )
    return {d: (var, int(bound), int(total)) for d, var, bound, total in rows}


@pytest.mark.parametrize("name", RENDERS)
def test_each_grace_period_is_its_calls_bound_plus_30_s_as_the_docs_table_says(name: str) -> None:
    objs = render(name)
    table = _grace_table()
    assert set(table) == {"tandem-thinker", "tandem-actor", "tandem-tools"}, table
    for deployment, (var, bound, total) in table.items():
        workload = named(objs, "Deployment", deployment)
        env = env_of(objs, workload, containers(workload)[0])
        assert float(env[var]) == bound and bound + 30 == total, (
            f"{name}: {var}={env[var]}, the table says {bound}"
        )
        grace = pod_spec(workload)["terminationGracePeriodSeconds"]
        assert grace == float(env[var]) + 30, f"{name}: {deployment} waits {grace} s for a {env[var]} s call"
        assert grace > float(env.get("TANDEM_LEASE_SECONDS", 30)), f"{name}: {deployment}'s grace period"


@pytest.mark.parametrize("name", RENDERS)
def test_every_probe_points_at_a_port_and_path_the_process_serves(name: str) -> None:
    objs = render(name)
    for workload in filter(is_tandem, workloads(objs)):
        role = pod_labels(workload)["app.kubernetes.io/component"]
        c = containers(workload)[0]
        env = env_of(objs, workload, c)
        served = {
            int(command_option(c, "--port") if role in ("api", "flower") else env["TANDEM_METRICS_PORT"])
        }
        probes = {k: c[k] for k in ("readinessProbe", "livenessProbe", "startupProbe") if k in c}
        assert "readinessProbe" in probes and "livenessProbe" in probes, f"{name}: {role} lacks probes"
        for kind, probe in probes.items():
            if "httpGet" in probe:
                assert port_number(c, probe["httpGet"]["port"]) in served, (
                    f"{name}: {role}'s {kind} probes a port it does not serve"
                )
            else:
                assert probe["exec"]["command"] == ["tandem", "health", "--timeout", "3"], (name, role, kind)
        if role in ROLES:
            path = c["livenessProbe"]["httpGet"]["path"]
            assert path == "/metrics?name%5B%5D=python_info" == c["startupProbe"]["httpGet"]["path"], path
            start = c["startupProbe"]
            assert start["periodSeconds"] * start["failureThreshold"] >= 300, (
                f"{name}: {role} start-up under 5 min"
            )
            note = workload["spec"]["template"]["metadata"].get("annotations", {})
            assert note.get("prometheus.io/port") == env["TANDEM_METRICS_PORT"], f"{name}: {role} annotations"
        if role == "api":
            assert c["livenessProbe"]["httpGet"]["path"] == "/openapi.json"
        if role == "flower":
            assert {probes[k]["httpGet"]["path"] for k in probes} == {"/healthcheck"}


@pytest.mark.parametrize("name", RENDERS)
def test_every_service_selects_one_workloads_pods_on_a_port_they_declare(name: str) -> None:
    objs = render(name)
    for svc in of_kind(objs, "Service"):
        chosen = [
            w
            for w in workloads(objs)
            if namespace_of(w) == namespace_of(svc)
            and selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(w))
        ]
        assert len(chosen) == 1, (
            f"{name}: Service {svc['metadata']['name']} selects {[w['metadata']['name'] for w in chosen]}"
        )
        ports = {p.get("name"): p["containerPort"] for c in containers(chosen[0]) for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            assert target in ports or target in ports.values(), (
                f"{name}: {svc['metadata']['name']} targets {target}"
            )


@pytest.mark.parametrize("name", RENDERS)
def test_each_disruption_budget_selects_its_roles_pods(name: str) -> None:
    objs = render(name)
    for pdb in of_kind(objs, "PodDisruptionBudget"):
        chosen = [
            w["metadata"]["name"] for w in workloads(objs) if selects(pdb["spec"]["selector"], pod_labels(w))
        ]
        assert chosen == [pdb["metadata"]["name"]], f"{name}: PDB {pdb['metadata']['name']} selects {chosen}"
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        if pdb["metadata"]["name"] == "tandem-api":
            assert pdb["spec"] == {**pdb["spec"], "minAvailable": 1}
            assert named(objs, "Deployment", "tandem-api")["spec"]["replicas"] == 2
        else:
            assert pdb["spec"]["maxUnavailable"] == "25%"


# -- the API's host names and the Ingress ----------------------------------------------------------


def _allowed(host: str, allowed: str) -> bool:
    """docs/kubernetes.md's rule: a name, or with a leading dot every name ending with it."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return any(name == a or (a.startswith(".") and name.endswith(a)) for a in allowed.split(","))


@pytest.mark.parametrize("name", ["ingress", "quickstart-ingress"])
def test_the_ingress_reaches_the_api_service_and_its_hosts_are_allowed(name: str) -> None:
    objs = render(name)
    (ingress,) = of_kind(objs, "Ingress")
    api = named(objs, "Deployment", "tandem-api")
    allowed = env_of(objs, api, containers(api)[0])["TANDEM_API_ALLOWED_HOSTS"]
    base_objs = render("base")
    base_api = named(base_objs, "Deployment", "tandem-api")
    base = env_of(base_objs, base_api, containers(base_api)[0])
    assert set(base["TANDEM_API_ALLOWED_HOSTS"].split(",")) <= set(allowed.split(",")), (
        "the component drops base names"
    )
    hosts = {rule["host"] for rule in ingress["spec"]["rules"]}
    assert hosts == {h for t in ingress["spec"]["tls"] for h in t["hosts"]}, (
        "TLS does not cover the Ingress's hosts"
    )
    for host in hosts:
        assert _allowed(host, allowed), (
            f"the Ingress's host {host} gets 400 host_not_allowed from the API ({allowed})"
        )
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            svc = named(objs, "Service", backend["name"])
            assert selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(api)), (
                "the backend is not the API"
            )
            (port,) = [
                p
                for p in svc["spec"]["ports"]
                if p.get("name") == backend["port"].get("name") or p["port"] == backend["port"].get("number")
            ]
            assert port_number(containers(api)[0], port["targetPort"]) == int(
                command_option(containers(api)[0], "--port")
            )
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert [t["secretName"] for t in ingress["spec"]["tls"]] == ["tandem-api-tls"]
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600


def test_the_base_allow_list_answers_the_callers_of_the_docs_table() -> None:
    objs = render("base")
    api = named(objs, "Deployment", "tandem-api")
    allowed = env_of(objs, api, containers(api)[0])["TANDEM_API_ALLOWED_HOSTS"]
    assert allowed == documented_allow_list()
    callers = documented_callers()
    assert len(callers) == 6 and callers["tandem-api.tandem:8000"] is False, callers
    for host, want in callers.items():
        assert _allowed(host, allowed) is bool(want), (
            f"{host}: the docs say {want}, the base's list says otherwise"
        )


# -- the quick start is self-contained -------------------------------------------------------------


def test_the_quick_start_is_self_contained() -> None:
    objs = render("quickstart")
    (ns,) = of_kind(objs, "Namespace")
    assert ns["metadata"]["name"] == NAMESPACE
    assert {namespace_of(o) for o in objs if o["kind"] != "Namespace"} == {NAMESPACE}
    assert all("namespace" in o["metadata"] for o in objs if o["kind"] != "Namespace"), (
        "an object without namespace"
    )
    secret = named(objs, "Secret", "tandem-secrets")
    data = secret.get("stringData") or {
        k: __import__("base64").b64decode(v).decode() for k, v in secret["data"].items()
    }
    assert (
        data["TANDEM_API_TOKENS"] == "quickstart-token-not-a-secret"
        and data["FLOWER_BASIC_AUTH"] == "quickstart:not-a-secret"
    )
    redis = named(objs, "StatefulSet", "tandem-redis")
    for key in ("TANDEM_BROKER_URL", "TANDEM_RESULT_BACKEND", "TANDEM_REDIS_URL"):
        m = re.fullmatch(r"redis://([a-z0-9-]+):(\d+)/\d+", data[key])
        assert m, f"{key}={data[key]}"
        svc = named(objs, "Service", m.group(1))
        assert selects({"matchLabels": svc["spec"]["selector"]}, pod_labels(redis)), (
            f"{key} names a Service not on Redis"
        )
        assert int(m.group(2)) in {p["port"] for p in svc["spec"]["ports"]}, (
            f"{key}'s port is not the Service's"
        )
    assert (
        redis["spec"]["serviceName"] == "tandem-redis"
        and named(objs, "Service", "tandem-redis")["spec"]["clusterIP"] == "None"
    )
    (redis_c,) = containers(redis)
    assert (
        "--appendonly" in redis_c["command"]
        and redis_c["command"][redis_c["command"].index("--appendonly") + 1] == "yes"
    )
    assert "--port" not in redis_c["command"] and {p["containerPort"] for p in redis_c["ports"]} == {6379}
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert (
        claim["spec"]["resources"]["requests"]["storage"] == "1Gi" and "storageClassName" not in claim["spec"]
    )
    assert [m["mountPath"] for m in redis_c["volumeMounts"]] == ["/data"] and "/data" in redis_c["command"]
    for w in filter(is_tandem, workloads(objs)):
        role = pod_labels(w)["app.kubernetes.io/component"]
        assert w["spec"].get("replicas", 1) == (2 if role == "api" else 1), (
            f"{role}: {w['spec'].get('replicas')}"
        )
        for c in containers(w):
            assert c["image"] == "tandem:latest" and c.get("imagePullPolicy") == "IfNotPresent", (
                role,
                c["image"],
            )
            assert c["resources"]["requests"]["cpu"] == "100m", (role, c["resources"])
        pod_env(objs, w, containers(w)[0])  # every non-optional Secret and ConfigMap key exists
    for kind_name in ("deployment/tandem-actor", "svc/tandem-api"):
        assert kind_name in KUBERNETES_MD.read_text()
    assert 8000 in {p["port"] for p in named(objs, "Service", "tandem-api")["spec"]["ports"]}
    cm = [o for o in of_kind(objs, "ConfigMap") if o["metadata"]["name"].startswith("tandem-config-")]
    assert len(cm) == 1, "the ConfigMap's name carries no hash of its content"


# -- network policies, evaluated as Kubernetes does -----------------------------------------------


OUTSIDE = End(None)
ELSEWHERE = End("team-b", {"app": "caller"})
INGRESS_NGINX = End("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"})
KUBE_DNS = End("kube-system", {"k8s-app": "kube-dns"}, {"dns": 53})
SAME_NS_STRANGER = End(NAMESPACE, {"app": "something-else"})


DATASTORES = (6379, 6380, 26379, 5672, 5671)


def _docs_egress(role: str, dst: End, port: int, protocol: str) -> bool:
    """docs/kubernetes.md's table, egress: DNS and the datastores for all, 443 and 8000 for the
    Thinker and the Actor, nothing else."""
    if port == 53:
        return True
    return protocol == "TCP" and (
        port in DATASTORES or (role in ("thinker", "actor") and port in (443, 8000))
    )


def _docs_ingress(role: str, src: End, port: int) -> bool:
    """The same table, ingress: the API's 8000 from anywhere, the workers' 9808 from any pod."""
    return (role == "api" and port == 8000) or (role in ROLES and port == 9808 and src.namespace is not None)


@pytest.mark.parametrize("name", ["base", "quickstart", "redis-broker", "guide"])
def test_the_network_policies_open_exactly_the_documented_ways(name: str) -> None:
    objs = render(name)
    pods = {
        pod_labels(w)["app.kubernetes.io/component"]: pod_end(w) for w in filter(is_tandem, workloads(objs))
    }
    wrong = []

    def expect(src: End, dst: End, port: int, want: bool, what: str, protocol: str = "TCP") -> None:
        if connects(objs, src, dst, port, protocol) != want:
            wrong.append(f"{what}/{protocol}: {'denied' if want else 'allowed'}")

    outside_ports = (53, *DATASTORES, 443, 8000, 80, 8080, 11434, 5432, 4318, 9808)
    for role, pod in pods.items():
        expect(pod, KUBE_DNS, 53, True, f"{role} -> DNS", "UDP")
        for port in outside_ports:
            for proto in ("TCP", "UDP") if port == 53 else ("TCP",):
                expect(
                    pod,
                    OUTSIDE,
                    port,
                    _docs_egress(role, OUTSIDE, port, proto),
                    f"{role} -> outside:{port}",
                    proto,
                )
        for other_role, other in pods.items():
            for port in other.ports.values():
                want = _docs_egress(role, other, port, "TCP") and _docs_ingress(other_role, pod, port)
                expect(pod, other, port, want, f"{role} -> {other_role}:{port}")
        for src in (PROMETHEUS, ELSEWHERE, INGRESS_NGINX, SAME_NS_STRANGER, OUTSIDE):
            for port in (*pod.ports.values(), 22, 6379):
                expect(src, pod, port, _docs_ingress(role, src, port), f"{src.namespace} -> {role}:{port}")
    if name == "quickstart":
        redis = pod_end(named(objs, "StatefulSet", "tandem-redis"))
        for role, pod in pods.items():
            expect(pod, redis, 6379, True, f"{role} -> quick-start Redis")
        for stranger in (
            SAME_NS_STRANGER,
            ELSEWHERE,
            End("team-b", pods["actor"].labels),
            OUTSIDE,
            PROMETHEUS,
        ):
            expect(stranger, redis, 6379, False, f"{stranger.namespace}/{dict(stranger.labels)} -> Redis")
        for dst, port in ((OUTSIDE, 443), (KUBE_DNS, 53), (pods["api"], 8000), (OUTSIDE, 6379)):
            expect(redis, dst, port, False, f"Redis -> {dst.namespace}:{port}")
    assert not wrong, f"{name}: " + "; ".join(wrong)


def test_the_docs_policy_examples_open_and_narrow_what_they_say() -> None:
    traced = render("tracing")
    collector = End("monitoring", {"app": "otel-collector"})
    for w in filter(is_tandem, workloads(traced)):
        pod = pod_end(w)
        assert connects(traced, pod, collector, 4318), f"{w['metadata']['name']} cannot reach the collector"
        assert not connects(traced, pod, End("team-b", {"app": "x"}), 4318), "4318 opened beyond monitoring"
    narrowed = render("narrowed")
    vllm = End("llm", {"app": "vllm"})
    for role in ("thinker", "actor"):
        pod = pod_end(role_deployment(narrowed, role))
        assert connects(narrowed, pod, vllm, 8000), f"{role} cannot reach vLLM in llm"
        for dst, port in ((OUTSIDE, 443), (OUTSIDE, 8000), (End("team-b", {"app": "vllm"}), 8000)):
            assert not connects(narrowed, pod, dst, port), (
                f"narrowed {role} still reaches {dst.namespace}:{port}"
            )
