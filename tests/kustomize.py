"""Rendering ``deploy/kubernetes`` with ``kubectl kustomize`` for the tests, and reading the result.

``render`` skips the calling test, saying so, where ``kubectl`` is missing: neither PyPI nor
Debian's packages carry it, so ``.ci/run`` cannot install it on a fresh machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
KUSTOMIZE = ROOT / "deploy" / "kubernetes"
OVERLAYS = KUSTOMIZE / "overlays"
COMPONENTS = KUSTOMIZE / "components"
Objects = list[dict[str, Any]]


def render(path: Path) -> Objects:
    """The objects ``kubectl kustomize path`` renders."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: the Kustomize overlays are not rendered here")
    done = subprocess.run(["kubectl", "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def render_with(where: Path, overlay: Path, *components: Path, namespace: str | None = None) -> Objects:
    """``overlay`` with ``components`` added, as a user's own overlay in ``where`` adds them."""
    where.mkdir(parents=True, exist_ok=True)
    lines = [
        "apiVersion: kustomize.config.k8s.io/v1beta1",
        "kind: Kustomization",
        *([f"namespace: {namespace}"] if namespace else []),
        "resources:",
        f"  - {os.path.relpath(overlay, where)}",  # kustomize wants relative paths
    ]
    if components:
        lines += ["components:", *(f"  - {os.path.relpath(c, where)}" for c in components)]
    (where / "kustomization.yaml").write_text("\n".join(lines) + "\n")
    return render(where)


def of(objects: Objects, kind: str) -> dict[str, dict[str, Any]]:
    """The objects of one kind, by name."""
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    """The pod template's spec of a Deployment or StatefulSet."""
    return workload["spec"]["template"]["spec"]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    """The one container of a workload."""
    [only] = pod_spec(workload)["containers"]
    return only


def config(objects: Objects) -> dict[str, str]:
    """The data of the one ConfigMap."""
    [found] = of(objects, "ConfigMap").values()
    return dict(found["data"])


def workloads(objects: Objects) -> dict[str, dict[str, Any]]:
    """Every Deployment and StatefulSet, by name."""
    return {**of(objects, "Deployment"), **of(objects, "StatefulSet")}
