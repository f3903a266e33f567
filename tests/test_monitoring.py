"""The Grafana dashboard and the Prometheus alert rules under ``deploy/monitoring``: they load, every
metric they name is one tandem exports, and (with promtool) the rules are valid and each alert
fires on the series that mean trouble and stays quiet otherwise (``alerts.test.yaml``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem.tasks import metrics
from tandem.tasks.state.census import Census

MONITORING = Path(__file__).resolve().parent.parent / "deploy" / "monitoring"
NAME = re.compile(r"\btandem_[a-z0-9_]+\b")


def _exported() -> set[str]:
    """Every sample name tandem's workers serve on ``/metrics``."""
    families = [
        fam
        for value in vars(metrics).values()
        if hasattr(value, "describe") and hasattr(value, "_name")
        for fam in value.describe()
    ]
    families += list(metrics.FleetCollector(list).collect())
    families += list(metrics.QueueDepthCollector(dict).describe())
    families += list(metrics.JobCensusCollector(Census).describe())
    families += list(metrics.TenantCollector(list).describe())
    names: set[str] = set()
    for fam in families:
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(fam.type, ("",))
        names |= {fam.name + suffix for suffix in suffixes}
    return names


def test_the_exported_names_are_read_from_the_metrics_module() -> None:
    exported = _exported()
    assert {"tandem_jobs_ended_total", "tandem_step_seconds_bucket", "tandem_queue_depth"} <= exported
    assert "tandem_worker_up" in exported and "tandem_jobs_ended" not in exported
    assert {"tandem_jobs", "tandem_jobs_parked", "tandem_jobs_live"} <= exported


def _dashboard() -> dict[str, Any]:
    return json.loads((MONITORING / "grafana-dashboard.json").read_text())


def test_the_dashboard_loads_and_each_panel_queries_prometheus() -> None:
    dashboard = _dashboard()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 12
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    assert dashboard["templating"]["list"][0]["type"] == "datasource"
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]


def test_every_metric_the_dashboard_and_the_alerts_name_is_exported() -> None:
    exprs = [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"][0]["rules"]
    exprs += [r["expr"] for r in rules]
    named = {name for expr in exprs for name in NAME.findall(expr)}
    assert len(named) >= 12
    assert named - _exported() == set()


def test_each_alert_says_what_it_means_and_what_to_do() -> None:
    rules = yaml.safe_load((MONITORING / "alerts.yaml").read_text())["groups"][0]["rules"]
    names = {r["alert"] for r in rules}
    assert {
        "TandemWorkersMissing",
        "TandemBacklogGrowing",
        "TandemNoProgress",
        "TandemJobsRescued",
        "TandemJobsGivenUp",
        "TandemModelHost429Storm",
    } <= names
    assert sorted(r["labels"]["role"] for r in rules if r["alert"] == "TandemWorkersMissing") == [
        "actor",
        "thinker",
        "tools",
    ]
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing: CI installs Debian's prometheus package (see .ci/run)")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


@pytest.mark.parametrize("check", [["check", "rules", "alerts.yaml"], ["test", "rules", "alerts.test.yaml"]])
def test_promtool_accepts_the_rules_and_their_unit_tests(check: list[str]) -> None:
    done = subprocess.run(
        [_promtool(), *check], cwd=MONITORING, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
