"""Which connections a set of NetworkPolicies lets through, read as Kubernetes reads them.

A pod is isolated in one direction once any policy of its namespace selects it with that
``policyType``; a connection then passes only when some such policy has a rule whose peers and
ports match it, on both ends (the source's egress and the destination's ingress). Policies are
additive: none removes what another allows. A named port is the destination pod's container port
of that name. An address outside the cluster (``None`` for a peer) matches only rules without
peers or with an ``ipBlock``. A policy rendered without a namespace is in ``NAMESPACE``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Policy = dict[str, Any]
NAMESPACE = "tandem"
"""Where the fleet runs: the namespace of a pod, and of a policy, that names none."""


@dataclass(frozen=True)
class Pod:
    """One pod: its labels, its named container ports, its namespace."""

    labels: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)
    namespace: str = NAMESPACE


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Whether a label selector (``matchLabels``, ``matchExpressions``) selects ``labels``."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        matched = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not matched:
            return False
    return True


def _peer_matches(peers: list[dict[str, Any]] | None, peer: Pod | None, namespace: str) -> bool:
    if not peers:
        return True
    for entry in peers:
        if "ipBlock" in entry:
            if peer is None:
                return True
            continue
        if peer is None:
            continue
        spaces = entry.get("namespaceSelector")
        in_namespace = (
            peer.namespace == namespace
            if spaces is None
            else selects(spaces, {"kubernetes.io/metadata.name": peer.namespace})
        )
        if in_namespace and selects(entry.get("podSelector"), peer.labels):
            return True
    return False


def _port_matches(ports: list[dict[str, Any]] | None, port: int, protocol: str, target: Pod | None) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != protocol:
            continue
        number = entry.get("port")
        if number is None:
            return True
        if isinstance(number, str):
            number = (target.ports if target is not None else {}).get(number)
        if number is not None and number <= port <= entry.get("endPort", number):
            return True
    return False


def _direction_allows(
    policies: list[Policy],
    pod: Pod,
    kind: str,
    peer: Pod | None,
    port: int,
    protocol: str,
    target: Pod | None,
) -> bool:
    rules_key, peers_key = ("egress", "to") if kind == "Egress" else ("ingress", "from")
    isolating = [
        p
        for p in policies
        if p["metadata"].get("namespace", NAMESPACE) == pod.namespace
        and selects(p["spec"]["podSelector"], pod.labels)
        and kind in p["spec"].get("policyTypes", ["Ingress"])
    ]
    if not isolating:
        return True
    return any(
        _peer_matches(rule.get(peers_key), peer, pod.namespace)
        and _port_matches(rule.get("ports"), port, protocol, target)
        for p in isolating
        for rule in p["spec"].get(rules_key) or []
    )


def allows(
    policies: list[Policy], source: Pod | None, target: Pod | None, port: int, protocol: str = "TCP"
) -> bool:
    """Whether ``source`` may open a connection to ``target`` on ``port`` (``None``: an address
    outside the cluster)."""
    if source is not None and not _direction_allows(
        policies, source, "Egress", target, port, protocol, target
    ):
        return False
    return target is None or _direction_allows(policies, target, "Ingress", source, port, protocol, target)
