"""The Kubernetes manifests as a cluster reads them, for ``tests/test_breaking_kubernetes.py``.

Written from docs/kubernetes.md alone (by a tester who did not write the manifests): every
rendering is made with ``kubectl kustomize`` exactly as the docs' ``kubectl apply -k`` would build
it, the docs' own example overlays included (taken from the code blocks of the docs, so they
follow the docs when the docs change); label selectors, pod environments and NetworkPolicies are
evaluated with Kubernetes' rules, not with the manifests' own comments.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
DOCS = REPO / "docs"
NAMESPACE = "tandem"
"""The namespace the docs install into (``kubectl -n tandem``); the base names none."""

Obj = dict[str, Any]


def kustomize(path: Path) -> list[Obj]:
    """``kubectl kustomize PATH``: what ``kubectl apply -k PATH`` applies."""
    done = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {path} failed: {done.stderr}"
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


def code_blocks(page: Path) -> list[str]:
    """The fenced code blocks of a docs page, in order, without their fences."""
    return re.findall(r"^```[a-z]*\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def block(page: Path, first_line: str, containing: str = "") -> str:
    """The one code block of ``page`` whose first line starts with ``first_line`` (and that holds
    ``containing``)."""
    found = [b for b in code_blocks(page) if b.startswith(first_line) and containing in b]
    assert len(found) == 1, f"{page.name}: {len(found)} code blocks start with {first_line!r}"
    return found[0]


KUBERNETES_MD = DOCS / "kubernetes.md"
TRACING_MD = DOCS / "tracing.md"


def _guide_overlays() -> dict[str, dict[str, Any]]:
    """The user overlays the docs write, as (kustomization, extra files, copied folders)."""
    header = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": NAMESPACE,
    }
    on = "../deploy/kubernetes/overlays/"
    egress = block(KUBERNETES_MD, "# my-tandem/collector-egress.yaml")
    narrowing = yaml.safe_load(
        block(KUBERNETES_MD, "# in my-tandem/kustomization.yaml", "tandem-model-hosts")
    )
    operator = yaml.safe_load(
        block(KUBERNETES_MD, "# in my-tandem/kustomization.yaml", "prometheus-operator")
    )
    tracing = yaml.safe_load(block(TRACING_MD, "# my-tandem/kustomization.yaml"))
    return {
        # "Settings and deploying": the guide's own overlay, on rabbitmq-quorum.
        "guide": {"text": block(KUBERNETES_MD, "# my-tandem/kustomization.yaml\n")},
        # "Ingress": a copy of components/ingress in my-tandem/ingress/, on redis-broker.
        "ingress": {
            "text": block(KUBERNETES_MD, "# my-tandem/kustomization.yaml, with a copy of components/ingress"),
            "copies": {"ingress": DEPLOY / "kubernetes" / "components" / "ingress"},
        },
        # "Prometheus Operator": the component and the label patch, here on redis-broker.
        "prometheus-operator": {
            "text": yaml.safe_dump({**header, "resources": [on + "redis-broker"], **operator})
        },
        # "Network policies", narrowing: the model roles reach only vLLM in namespace llm.
        "narrowed": {"text": yaml.safe_dump({**header, "resources": [on + "redis-broker"], **narrowing})},
        # docs/tracing.md on the quick start, with the collector's egress policy of "Opening more".
        "tracing": {
            "text": yaml.safe_dump(
                {**header, "resources": [on + "quickstart", "collector-egress.yaml"], **tracing}
            ),
            "files": {"collector-egress.yaml": egress},
        },
        # The Ingress component on the quick start (a Secret to start its API with).
        "quickstart-ingress": {
            "text": yaml.safe_dump(
                {
                    **header,
                    "resources": [on + "quickstart"],
                    "components": ["../deploy/kubernetes/components/ingress"],
                }
            )
        },
    }


def build_user_overlay(root: Path, name: str) -> Path:
    """Lay out ``root/deploy`` (a copy of the repository's) and ``root/my-tandem`` as the docs do."""
    spec = _guide_overlays()[name]
    shutil.copytree(DEPLOY, root / "deploy")
    mine = root / "my-tandem"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(spec["text"])
    for file, text in spec.get("files", {}).items():
        (mine / file).write_text(text)
    for folder, source in spec.get("copies", {}).items():
        shutil.copytree(source, mine / folder)
    return mine


REPO_RENDERS = {
    "base": DEPLOY / "kubernetes" / "base",
    "redis-broker": DEPLOY / "kubernetes" / "overlays" / "redis-broker",
    "rabbitmq-quorum": DEPLOY / "kubernetes" / "overlays" / "rabbitmq-quorum",
    "quickstart": DEPLOY / "kubernetes" / "overlays" / "quickstart",
}
RENDERS = (
    *REPO_RENDERS,
    "guide",
    "ingress",
    "prometheus-operator",
    "narrowed",
    "tracing",
    "quickstart-ingress",
)


@functools.cache
def _render(name: str) -> tuple[Obj, ...]:
    if name in REPO_RENDERS:
        return tuple(kustomize(REPO_RENDERS[name]))
    with tempfile.TemporaryDirectory(prefix="tandem-kustomize-") as tmp:
        return tuple(kustomize(build_user_overlay(Path(tmp), name)))


def render(name: str) -> list[Obj]:
    """The objects of one rendering (cached; a deep copy each call)."""
    return yaml.safe_load(yaml.safe_dump(list(_render(name))))


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} named {name!r} in the rendering"
    return found[0]


def namespace_of(obj: Obj) -> str:
    return str(obj["metadata"].get("namespace", NAMESPACE))


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")


def workloads(objs: list[Obj]) -> list[Obj]:
    return [o for o in objs if o["kind"] in WORKLOADS]


def pod_spec(workload: Obj) -> Obj:
    return workload["spec"]["template"]["spec"]


def pod_labels(workload: Obj) -> dict[str, str]:
    return dict(workload["spec"]["template"]["metadata"].get("labels", {}))


def is_tandem(workload: Obj) -> bool:
    """A pod of tandem's image (the docs' "every pod runs the one image of the Dockerfile")."""
    return pod_labels(workload).get("app.kubernetes.io/name") == "tandem"


def containers(workload: Obj) -> list[Obj]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against labels; ``{}`` selects all."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def command_option(container: Obj, option: str) -> str:
    """The value after ``option`` in a container's command and args."""
    words = [*container.get("command", []), *container.get("args", [])]
    assert option in words, f"{container['name']}: no {option} in {words}"
    return str(words[words.index(option) + 1])


def pod_env(
    objs: list[Obj], workload: Obj, container: Obj, secret: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment Kubernetes gives ``container``: ``envFrom`` first, then ``env``; Secrets
    and ConfigMaps are read from the rendering, or the Secret named in the docs from ``secret``.
    A reference that Kubernetes would refuse to start the pod with fails here."""
    who = f"{workload['metadata']['name']}/{container['name']}"

    def source(kind: str, name: str) -> Mapping[str, str] | None:
        found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
        if found:
            obj = found[0]
            if kind == "Secret" and "data" in obj:
                import base64

                return {k: base64.b64decode(v).decode() for k, v in obj["data"].items()}
            return {**obj.get("data", {}), **obj.get("stringData", {})}
        return secret if kind == "Secret" and secret is not None else None

    env: dict[str, str] = {}
    for ref in container.get("envFrom", []):
        kind, body = (
            ("ConfigMap", ref["configMapRef"]) if "configMapRef" in ref else ("Secret", ref["secretRef"])
        )
        data = source(kind, body["name"])
        assert data is not None or body.get("optional"), (
            f"{who}: envFrom names the missing {kind} {body['name']}"
        )
        env.update({ref.get("prefix", "") + k: v for k, v in (data or {}).items()})
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        frm = var.get("valueFrom", {})
        for kind, key in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
            if key in frm:
                ref = frm[key]
                data = source(kind, ref["name"])
                if data is not None and ref["key"] in data:
                    env[var["name"]] = data[ref["key"]]
                else:
                    assert ref.get("optional"), (
                        f"{who}: {var['name']} reads {kind} {ref['name']}/{ref['key']}: missing"
                    )
    return env


def secret_keys(container: Obj) -> dict[str, bool]:
    """The Secret keys a container reads, each with whether it is optional; a whole-Secret
    ``envFrom`` shows as ``"*"``."""
    keys = {"*": False} if any("secretRef" in ref for ref in container.get("envFrom", [])) else {}
    for var in container.get("env", []):
        ref = var.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            keys[ref["key"]] = bool(ref.get("optional"))
    return keys


# -- NetworkPolicies, as Kubernetes evaluates them ------------------------------------------------


@dataclass(frozen=True)
class End:
    """One end of a connection: a pod (namespace, labels, named container ports) or, with
    ``namespace=None``, an address outside the cluster."""

    namespace: str | None
    labels: Mapping[str, str] = field(default_factory=dict)
    ports: Mapping[str, int] = field(default_factory=dict)
    ip: str = "203.0.113.7"
    namespace_labels: Mapping[str, str] = field(default_factory=dict)

    def ns_labels(self) -> dict[str, str]:
        return {"kubernetes.io/metadata.name": str(self.namespace), **self.namespace_labels}


def pod_end(workload: Obj) -> End:
    ports = {
        p["name"]: int(p["containerPort"])
        for c in containers(workload)
        for p in c.get("ports", [])
        if "name" in p
    }
    return End(namespace_of(workload), pod_labels(workload), ports)


def _types(policy: Obj) -> list[str]:
    spec = policy["spec"]
    return list(spec.get("policyTypes") or ["Ingress", *(["Egress"] if spec.get("egress") else [])])


def _port_matches(entries: list[Obj] | None, port: int, protocol: str, dst: End) -> bool:
    if not entries:
        return True
    for entry in entries:
        if entry.get("protocol", "TCP") != protocol:
            continue
        want = entry.get("port")
        if want is None:
            return True
        if isinstance(want, str):  # a named port: the destination pod's container port of that name
            if dst.namespace is not None and dst.ports.get(want) == port:
                return True
            continue
        if int(want) <= port <= int(entry.get("endPort") or want):
            return True
    return False


def _peer_matches(peers: list[Obj] | None, other: End, policy_namespace: str) -> bool:
    if not peers:
        return True
    for peer in peers:
        if "ipBlock" in peer:
            block_ = peer["ipBlock"]
            if other.namespace is None:
                ip = ipaddress.ip_address(other.ip)
                if ip in ipaddress.ip_network(block_["cidr"]) and not any(
                    ip in ipaddress.ip_network(x) for x in block_.get("except", [])
                ):
                    return True
            continue
        if other.namespace is None:  # pod and namespace selectors select pods only
            continue
        if "namespaceSelector" in peer:
            if not selects(peer["namespaceSelector"], other.ns_labels()):
                continue
        elif other.namespace != policy_namespace:
            continue
        if "podSelector" in peer and not selects(peer["podSelector"], other.labels):
            continue
        return True
    return False


def _side_allows(
    policies: list[Obj], me: End, other: End, port: int, protocol: str, direction: str, dst: End
) -> bool:
    if me.namespace is None:
        return True  # outside the cluster: no NetworkPolicy applies
    mine = [
        p
        for p in policies
        if namespace_of(p) == me.namespace
        and direction in _types(p)
        and selects(p["spec"].get("podSelector"), me.labels)
    ]
    if not mine:
        return True  # not isolated in this direction
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    return any(
        _peer_matches(rule.get(peers_key), other, namespace_of(p))
        and _port_matches(rule.get("ports"), port, protocol, dst)
        for p in mine
        for rule in p["spec"].get(rules_key) or []
    )


def connects(objs: list[Obj], src: End, dst: End, port: int, protocol: str = "TCP") -> bool:
    """Whether the policies of the rendering let ``src`` open a connection to ``dst``'s ``port``:
    the source's egress and the destination's ingress must both allow it."""
    policies = of_kind(objs, "NetworkPolicy")
    return _side_allows(policies, src, dst, port, protocol, "Egress", dst) and _side_allows(
        policies, dst, src, port, protocol, "Ingress", dst
    )


# -- the docs' reference tables -------------------------------------------------------------------


def documented_variables() -> tuple[set[str], tuple[str, ...]]:
    """The variable names docs/configuration.md lists (``<ROLE>`` expanded), and the prefixes it
    documents as a family (``OTEL_*``: "the SDK's standard variables")."""
    text = (DOCS / "configuration.md").read_text()
    names: set[str] = set()
    for raw in re.findall(r"`([A-Z][A-Z0-9_<>]*_[A-Z0-9_<>]+)`", text):
        for role in ("THINKER", "ACTOR"):
            names.add(raw.replace("<ROLE>", role))
    return names, ("OTEL_",)


def documented_metrics() -> set[str]:
    """Every sample name docs/scaling.md's metrics table lists (histograms with their series)."""
    text = (DOCS / "scaling.md").read_text()
    names: set[str] = set()
    for name, kind in re.findall(r"^\| `(tandem_[a-z_]+)(?:\{[^}]*\})?` \| (\w+) \|", text, flags=re.M):
        names |= {name} | (
            {f"{name}_bucket", f"{name}_count", f"{name}_sum"} if kind == "histogram" else set()
        )
    return names


def docs_secret_file() -> dict[str, str]:
    """The keys and values of docs/kubernetes.md's ``tandem-secrets.env``."""
    text = block(KUBERNETES_MD, "cat > tandem-secrets.env")
    body = text.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    return dict(line.split("=", 1) for line in body.splitlines() if line.strip())


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)}


def doc_links(text: str) -> Iterator[tuple[str, str]]:
    """``docs/<page>.md#<anchor>`` references in a file's text."""
    yield from re.findall(r"docs/([a-z-]+\.md)#([a-z0-9-]+)", text)


# -- shared by the breaking tests ---------------------------------------------------------------

ROLES = ("thinker", "actor", "tools")
THREADS = {"thinker": 16, "actor": 16, "tools": 32}
"""docs/kubernetes.md: "16 threads for the Thinker and the Actor, 32 for tools"."""
KEDA = ("redis-broker", "rabbitmq-quorum", "guide", "ingress", "prometheus-operator", "narrowed")
"""The renderings with KEDA's ScaledObjects."""
PROMETHEUS = End("monitoring", {"app.kubernetes.io/name": "prometheus"})


def stand_in_secret() -> dict[str, str]:
    """docs/kubernetes.md's tandem-secrets.env, its ``...`` placeholders filled with values of the
    documented shape (a Fernet key, a 16+ character token, a model key)."""
    from cryptography.fernet import Fernet

    fill = {"TANDEM_SECRETS_KEY": Fernet.generate_key().decode(), "TANDEM_API_TOKENS": "t" * 32}
    return {k: fill.get(k, "sk-stand-in") if v == "..." else v for k, v in docs_secret_file().items()}


def env_of(objs: list[Obj], workload: Obj, container: Obj) -> dict[str, str]:
    """``pod_env`` with the rendering's Secret, or the docs' one where the rendering makes none."""
    has_secret = any(o["kind"] == "Secret" for o in objs)
    return pod_env(objs, workload, container, None if has_secret else stand_in_secret())


def role_deployment(objs: list[Obj], role: str) -> Obj:
    return named(objs, "Deployment", f"tandem-{role}")


def port_number(container: Obj, port: int | str) -> int:
    """A container's port by number or by name."""
    if isinstance(port, int):
        return port
    found = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    assert found, f"{container['name']} declares no port named {port!r}"
    return int(found[0])


def documented_callers(namespace: str = NAMESPACE) -> dict[str, bool | None]:
    """docs/kubernetes.md's table "The API's host names": each caller's ``Host`` (its URL's host
    and port, for tandem's namespace ``namespace``) and whether the base's list allows it
    (``None``: only with the Ingress component)."""
    text = KUBERNETES_MD.read_text().split("## The API's host names", 1)[1].split("\n## ", 1)[0]
    callers: dict[str, bool | None] = {}
    for url, by in re.findall(r"^\| [^|]+ \| `(https?://[^`]+)` \| ([^|]+) \|$", text, flags=re.M):
        host = url.split("://", 1)[1].replace("<namespace>", namespace)
        callers[host] = None if "Ingress" in by else not by.startswith("nothing")
    return callers


def documented_allow_list() -> str:
    """The base's ``TANDEM_API_ALLOWED_HOSTS`` as docs/kubernetes.md quotes it."""
    (quoted,) = re.findall(r"The base's\s+`config.env` holds `([^`]+)`", KUBERNETES_MD.read_text())
    return str(quoted)
