"""Breaking tests of the image and the manifests as processes, from docs/kubernetes.md,
docs/tracing.md (Compose, Kubernetes, the image) and docs/scaling.md (Docker), written by a tester
who did not write them.

The Dockerfile is carried out in a fresh environment (its COPY lines, ENV and install line), and
each process runs as a pod of the manifests runs it (``tests/integration/breaking_pods.py``): a
read-only root with an empty ``/tmp`` of its own, the environment Kubernetes (or compose) gives
it, rendered from the repository's manifests, and the Service names of its URLs resolving to a
Redis of the test's own on port 6379. The kubelet's probes, ``kubectl exec``, callers in other
namespaces and behind the Ingress are played with their exact commands, paths and ``Host`` names.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.breaking_k8s import (
    REPO,
    ROLES,
    block,
    containers,
    documented_callers,
    named,
    of_kind,
    pod_spec,
    render,
)
from tests.compose_file import compose_services, service_env
from tests.integration import plan_model
from tests.integration.breaking_fleet import (
    KUBELET,
    TOKEN,
    Fleet,
    answers,
    api,
    pod_of,
    spans_of,
    wait_final,
    wait_until,
)
from tests.integration.breaking_pods import (
    Collector,
    DataStore,
    Image,
    Pods,
    build_image,
    free_port,
    loopback_address,
)
from tests.openai_server import OpenAIServer, RecordedRequest, Reply

pytestmark = pytest.mark.integration
GOAL = "What is (17 * 23) + 4?"  # the quick start's `tandem run`


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tandem-breaking-image-", dir="/var/tmp"))
    yield path
    # A virtual environment is tens of thousands of files (a minute to delete on a busy disk):
    # removed by a process of its own that the run does not wait for.
    subprocess.Popen(["rm", "-rf", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def image(workdir: Path) -> Image:
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to run the image's processes on a read-only root")
    return build_image(workdir / "image")


@pytest.fixture(scope="module")
def quickstart(image: Image, workdir: Path) -> Iterator[Fleet]:
    """The quick start with docs/tracing.md's Kubernetes setting (the collector's endpoint in the
    ConfigMap) and the collector's egress policy: every pod as the rendering makes it."""
    fleet = Fleet(image, workdir, render("tracing"), ("qs",))
    yield fleet
    gone = fleet.close()
    assert not gone, f"pods exited by themselves: {gone}"


# -- the image ----------------------------------------------------------------------------------------


def test_the_images_install_is_consistent_and_carries_the_exporter(image: Image, workdir: Path) -> None:
    pods = Pods(image, workdir, {})
    check = pods.run(["pip", "check"], {})
    assert check.returncode == 0, check.stdout + check.stderr
    probe = "import opentelemetry.exporter.otlp.proto.http.trace_exporter, tandem; print(tandem.__version__)"
    done = pods.run(["python", "-c", probe], {})
    assert done.returncode == 0, f"the image cannot load the OTLP exporter: {done.stderr}"


def test_the_images_cmd_traces_a_job_on_a_read_only_root(image: Image, workdir: Path) -> None:
    """docs/tracing.md: the image carries the exporter; setting OTEL_* turns tracing on."""
    address = loopback_address()
    redis = DataStore(address, workdir).start()
    pods = Pods(image, workdir, {"tandem-redis": address})
    url = "redis://tandem-redis:6379/0"
    env = {"TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url, "TANDEM_REDIS_URL": url}
    port = free_port()
    with Collector(address) as collector:
        traced = {
            **env,
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{address}:4318",
            "OTEL_SERVICE_NAME": "tandem-image",
        }
        try:
            pods.start("cmd", image.cmd, {**traced, "TANDEM_METRICS_PORT": str(port)})
            wait_until(
                "the image's worker", answers(f"http://127.0.0.1:{port}/metrics?name%5B%5D=python_info"), pods
            )
            done = pods.run(["tandem", "run", GOAL], traced)
            assert done.returncode == 0 and "395" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
            (job_id,) = re.findall(r"job (\S+) submitted", done.stdout)

            def traced_roles() -> set[str]:
                spans = spans_of(collector, job_id)
                return {str(s.attributes.get("tandem.role")) for s in spans if s.name == "tandem.step"}

            wait_until("the job's step spans", lambda: set(ROLES) <= traced_roles(), pods, timeout=120)
            assert {s.service for s in spans_of(collector, job_id)} == {"tandem-image"}
        finally:
            gone = pods.stop_all()
            redis.stop()
    assert not gone, gone


def test_a_prefork_worker_counts_its_steps_on_a_read_only_root(image: Image, workdir: Path) -> None:
    """docs/kubernetes.md, Security context: `tandem worker --pool prefork` keeps its processes'
    metrics files in a fresh directory under /tmp, the pod's one writable place."""
    address = loopback_address()
    redis = DataStore(address, workdir).start()
    pods = Pods(image, workdir, {"tandem-redis": address})
    url = "redis://tandem-redis:6379/0"
    env = {"TANDEM_BROKER_URL": url, "TANDEM_RESULT_BACKEND": url, "TANDEM_REDIS_URL": url}
    port = free_port()
    try:
        pods.start("prefork", ["tandem", "worker", "all", "--pool", "prefork", "--concurrency", "2"],
                   {**env, "TANDEM_METRICS_PORT": str(port)})  # fmt: skip
        wait_until(
            "the prefork worker", answers(f"http://127.0.0.1:{port}/metrics?name%5B%5D=python_info"), pods
        )
        done = pods.run(["tandem", "run", GOAL], env)
        assert done.returncode == 0 and "395" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
        ok = re.findall(
            r'tandem_step_outcomes_total\{[^}]*task="tandem\.thinker_turn"[^}]*\} ([0-9.e+]+)', text
        )
        assert ok and sum(float(x) for x in ok) >= 2, "the prefork pool's steps are not counted"
    finally:
        gone = pods.stop_all()
        redis.stop()
    assert not gone, gone


# -- the quick start, pod by pod -------------------------------------------------------------------


def test_every_pods_readiness_probe_passes(quickstart: Fleet) -> None:
    for role in (*ROLES, "api"):
        probe = containers(named(quickstart.objs, "Deployment", f"tandem-{role}"))[0]["readinessProbe"]
        done = quickstart.pods.run(probe["exec"]["command"], quickstart.env[role], timeout=60)
        assert done.returncode == 0, f"{role}'s readiness probe: {done.stdout}{done.stderr}"


def test_the_liveness_paths_answer_the_kubelet(quickstart: Fleet) -> None:
    for role in ROLES:
        reply = httpx.get(quickstart.liveness(role), headers={"Host": f"{KUBELET}:9808"}, timeout=5)
        assert reply.status_code == 200, f"{role}: {reply.status_code}"
        names = set(re.findall(r"^([a-z_]+)[{ ]", reply.text, flags=re.M))
        assert names == {"python_info"}, f"{role}'s liveness scrape serves {names}, not one in-process metric"
    live = httpx.get(
        f"http://127.0.0.1:{quickstart.port['api']}/openapi.json", headers={"Host": f"{KUBELET}:8000"}
    )
    assert live.status_code == 200, live.text
    flower = httpx.get(
        f"http://127.0.0.1:{quickstart.port['flower']}/healthcheck", headers={"Host": f"{KUBELET}:5555"}
    )
    assert flower.status_code == 200, "Flower's probe path asks the kubelet for credentials"


def test_the_probe_paths_answer_any_host_and_flower_asks_for_the_quick_starts_password(
    quickstart: Fleet,
) -> None:
    for path in ("/healthz", "/openapi.json"):  # "The probes' paths answer any Host"
        reply = httpx.get(
            f"http://127.0.0.1:{quickstart.port['api']}{path}", headers={"Host": "anything.example"}
        )
        assert reply.status_code == 200, f"{path} refuses a Host: {reply.status_code}"
    flower = f"http://127.0.0.1:{quickstart.port['flower']}/"
    assert httpx.get(flower, timeout=30).status_code == 401, "Flower answers without its password"
    user, password = ["quickstart", "not-a-secret"]
    assert httpx.get(flower, auth=(user, password), timeout=30).status_code == 200


def test_the_console_through_port_forward_loads_with_its_assets(quickstart: Fleet) -> None:
    """`kubectl -n tandem port-forward svc/tandem-api 8000`, then http://localhost:8000/: the page
    and every file it loads come from the image's install (package data)."""
    base = f"http://127.0.0.1:{quickstart.port['api']}/"
    page = httpx.get(base, headers={"Host": "localhost:8000"}, timeout=30)
    assert page.status_code == 200 and "<html" in page.text.lower(), page.status_code
    assets = re.findall(r'(?:src|href)="([^"#:]+)"', page.text)
    assert assets, "the console loads no script or style"
    for asset in assets:
        reply = httpx.get(str(httpx.URL(base).join(asset)), headers={"Host": "localhost:8000"}, timeout=30)
        assert reply.status_code == 200 and reply.content, f"the console's {asset}: {reply.status_code}"


def test_the_readiness_probe_imports_neither_celery_nor_litellm(quickstart: Fleet) -> None:
    """docs/kubernetes.md, Probes: `tandem health` "imports neither Celery nor LiteLLM"."""
    probe = containers(named(quickstart.objs, "Deployment", "tandem-actor"))[0]["readinessProbe"]
    args = probe["exec"]["command"][1:]
    script = (
        "import sys\nfrom tandem.workers.cli import main\n"
        f"code = main({args!r})\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'celery', 'litellm'}), code)"
    )
    done = quickstart.pods.run(["python", "-c", script], quickstart.env["actor"], timeout=60)
    assert done.returncode == 0 and done.stdout.strip().endswith("[] 0"), done.stdout + done.stderr


def test_the_quick_start_job_runs_from_the_actor_pod_and_each_role_traces_it(quickstart: Fleet) -> None:
    """The docs' `kubectl -n tandem exec deployment/tandem-actor -- tandem run "..."`, then the
    job's steps at the collector under each Deployment's OTEL_SERVICE_NAME."""
    words = re.search(r"exec deployment/tandem-actor -- (tandem run \"[^\"]+\")", block_text())
    assert words, "the quick start's exec command moved"
    cmd = ["tandem", "run", json.loads(words.group(1)[len("tandem run ") :])]
    done = quickstart.pods.run(cmd, quickstart.env["actor"])
    assert done.returncode == 0 and "395" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    (job_id,) = re.findall(r"job (\S+) submitted", done.stdout)

    def services() -> dict[str, set[str]]:
        steps = [s for s in spans_of(quickstart.collector, job_id) if s.name == "tandem.step"]
        found: dict[str, set[str]] = {}
        for span in steps:
            found.setdefault(str(span.attributes.get("tandem.role")), set()).add(span.service)
        return found

    wait_until("each role's spans", lambda: set(ROLES) <= set(services()), quickstart.pods, timeout=120)
    assert {role: services()[role] for role in ROLES} == {r: {f"tandem-{r}"} for r in ROLES}


def block_text() -> str:
    from tests.breaking_k8s import KUBERNETES_MD

    return block(KUBERNETES_MD, "kubectl apply -k deploy/kubernetes/overlays/quickstart")


def test_callers_by_every_documented_name_are_answered_and_others_refused(quickstart: Fleet) -> None:
    hosts = documented_callers()  # docs/kubernetes.md, "The API's host names"
    assert "tandem.example.com" in hosts and "tandem-api.tandem:8000" in hosts, hosts
    for host, allowed in hosts.items():  # the Ingress's host: only with the ingress component
        reply = api(quickstart.port["api"], "POST", "/v1/jobs", host, json={"goal": GOAL, "max_rounds": 8})
        if allowed:
            assert reply.status_code == 202, f"{host}: {reply.status_code} {reply.text}"
            final = wait_final(quickstart.port["api"], reply.json()["id"], host)
            assert final["status"]["state"] == "completed", f"{host}: {final}"
        else:
            assert reply.status_code == 400, f"{host}: {reply.status_code} {reply.text}"
            error = reply.json()["error"]
            assert error["code"] == "host_not_allowed" and host.split(":")[0] in error["message"], error


def test_each_worker_serves_what_its_autoscaler_reads(quickstart: Fleet) -> None:
    """redis-broker's ScaledObjects divide the role's queue depth plus its running steps: every
    worker must serve the depth of each queue and count its steps under the task names the
    queries select."""
    reply = api(
        quickstart.port["api"], "POST", "/v1/jobs", "tandem-api", json={"goal": GOAL, "max_rounds": 8}
    )
    assert (
        wait_final(quickstart.port["api"], reply.json()["id"], "tandem-api")["status"]["state"] == "completed"
    )
    rule = named(render("prometheus-operator"), "PrometheusRule", "tandem")
    alerts = [
        r for g in rule["spec"]["groups"] for r in g["rules"] if r.get("alert") == "TandemWorkersMissing"
    ]
    assert {r["labels"]["role"] for r in alerts} == set(ROLES)
    queries = {so["spec"]["scaleTargetRef"]["name"][7:]: so["spec"]["triggers"][0]["metadata"]["query"]
               for so in of_kind(render("redis-broker"), "ScaledObject")}  # fmt: skip
    for role in ROLES:
        text = httpx.get(f"http://127.0.0.1:{quickstart.port[role]}/metrics", timeout=30).text
        for queue in ("celery", *ROLES):
            assert f'tandem_queue_depth{{queue="{queue}"}}' in text, f"{role} serves no depth of {queue}"
        (selector,) = re.findall(r'tandem_steps_running\{task=~?"([^"]+)"\}', queries[role])
        tasks = set(re.findall(r'tandem_steps_running\{task="([^"]+)"\}', text))
        ran = {t for t in tasks if not t.endswith((".infer", ".webhook"))}
        assert ran and all(re.fullmatch(selector, t) for t in ran), (
            f"{role} counts {ran}; its query reads {selector}"
        )
        # TandemWorkersMissing{role} reads tandem_worker_up{role=~...}: this worker must count.
        (up,) = re.findall(r'^tandem_worker_up\{[^}]*role="([^"]*)"[^}]*\} 1\.0$', text, flags=re.M)
        for rule in (r for r in alerts if r.get("labels", {}).get("role") == role):
            (pattern,) = re.findall(r'tandem_worker_up\{role=~"([^"]+)"\}', rule["expr"])
            assert re.fullmatch(pattern, up), f"the {role} worker reports role={up!r}, which its alert misses"


def test_every_pod_ends_within_its_grace_period_on_sigterm(quickstart: Fleet) -> None:
    """docs/kubernetes.md, Grace periods: on SIGTERM a worker "takes no new message, its running
    steps end, and it exits" before the kubelet's SIGKILL (the last quick-start test: it stops
    the pods)."""
    late = []
    for role in ("thinker", "actor", "tools", "api", "flower"):
        grace = pod_spec_of(quickstart.objs, role).get("terminationGracePeriodSeconds", 30)
        started = time.monotonic()
        code = quickstart.pods.stop(f"qs-{role}", wait=grace)
        took = time.monotonic() - started
        if took >= grace or code not in (0, -signal.SIGTERM):
            late.append(f"{role}: exit {code} after {took:.0f} s of a {grace} s grace period")
    assert not late, late


def pod_spec_of(objs: list[dict[str, Any]], role: str) -> dict[str, Any]:
    return dict(named(objs, "Deployment", f"tandem-{role}")["spec"]["template"]["spec"])


def test_the_ingress_host_is_answered_by_the_api_the_component_configures(
    image: Image, workdir: Path
) -> None:
    objs = render("quickstart-ingress")
    (ingress,) = of_kind(objs, "Ingress")
    fleet = Fleet(image, workdir, objs, ("ing",))
    try:
        for rule in ingress["spec"]["rules"]:
            reply = api(
                fleet.port["api"], "POST", "/v1/jobs", rule["host"], json={"goal": GOAL, "max_rounds": 8}
            )
            assert reply.status_code == 202, (
                f"through the Ingress ({rule['host']}): {reply.status_code} {reply.text}"
            )
            assert (
                wait_final(fleet.port["api"], reply.json()["id"], rule["host"])["status"]["state"]
                == "completed"
            )
    finally:
        gone = fleet.close()
    assert not gone, gone


def test_a_worker_stopped_mid_call_ends_its_step_and_commits_it(image: Image, workdir: Path) -> None:
    """docs/kubernetes.md, Grace periods: on SIGTERM (a rollout, a scale-down) a worker "takes no
    new message, its running steps end, and it exits". The quick start's Thinker is stopped while
    its model call is under way; the call is answered after the SIGTERM; the step must commit
    that answer (the job goes on with the new Thinker pod of the rollout) and never ask again."""
    objs = render("quickstart")
    address = loopback_address()
    redis = DataStore(address, workdir).start()
    pods = Pods(image, workdir, {"tandem-redis": address})
    arrived, release = threading.Event(), threading.Event()

    def thinker(request: RecordedRequest) -> Reply:
        if plan_model.turn(request) == 1:
            arrived.set()
            release.wait(300)
        return plan_model.thinker(request)

    goal = plan_model.goal_with_plan("Add 2 and 3.", [[{"name": "add", "args": {"a": 2, "b": 3}}]])
    try:
        with OpenAIServer(thinker) as thinker_host, OpenAIServer(plan_model.actor) as actor_host:
            models = {"TANDEM_TOOLKIT": "tests.integration.tools:toolkit", "PYTHONPATH": str(REPO)}
            for role, host in (("THINKER", thinker_host), ("ACTOR", actor_host)):
                models |= {f"TANDEM_{role}_MODEL": f"openai/{role.lower()}-model"}
                models |= {f"TANDEM_{role}_API_BASE": host.url, f"TANDEM_{role}_API_KEY": "k"}
            env: dict[str, dict[str, str]] = {}
            for role in ROLES:
                cmd, env[role], port = pod_of(objs, role)
                env[role] |= models
                pods.start(role, cmd, env[role])
                wait_until(
                    f"the {role} worker",
                    answers(f"http://127.0.0.1:{port}/metrics?name%5B%5D=python_info"),
                    pods,
                )
            run = pods.start("run", ["tandem", "run", goal], env["actor"])
            wait_until("the Thinker's first call", arrived.is_set, pods)
            pods.stopped.add(pods.started["thinker"].pid)
            pods.started["thinker"].send_signal(signal.SIGTERM)
            wait_until("the warm shutdown", lambda: "Warm shutdown" in pods.log("thinker").read_text(), pods)
            release.set()
            grace = pod_spec(named(objs, "Deployment", "tandem-thinker"))["terminationGracePeriodSeconds"]
            code = pods.started["thinker"].wait(grace)
            assert code == 0, f"the stopped Thinker exited {code}: {pods.log('thinker').read_text()[-3000:]}"
            cmd, env_new, _ = pod_of(objs, "thinker")
            pods.start("thinker-2", cmd, env_new | models)
            assert run.wait(300) == 0, pods.log("run").read_text()[-3000:]
            pods.stopped.add(run.pid)  # ended by itself, as a `tandem run` does
            firsts = [r for r in thinker_host.requests if plan_model.turn(r) == 1]
            assert len(firsts) == 1, (
                f"the Thinker's first call was made {len(firsts)} times: its step was lost"
            )
    finally:
        release.set()
        gone = pods.stop_all()
        redis.stop()
    assert not gone, gone


# -- probes while Redis hangs, and at start --------------------------------------------------------


def full_scrape(port: int) -> None:
    """Prometheus's scrape of every metric (it reads Redis: it hangs with it, or fails at the end)."""
    with contextlib.suppress(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=60)


def test_the_liveness_probes_answer_while_redis_hangs(image: Image, workdir: Path) -> None:
    """docs/kubernetes.md, Probes: liveness "reads neither Redis nor the broker"; a hung Redis
    must not restart the fleet, even while a full scrape hangs on it."""
    fleet = Fleet(image, workdir, render("quickstart"), ("hang",))
    scrapes: list[threading.Thread] = []
    try:
        fleet.redis.pause()
        for role in ROLES:
            scrape = threading.Thread(target=full_scrape, args=(fleet.port[role],), daemon=True)
            scrape.start()
            scrapes.append(scrape)
        for role in ROLES:
            probe = containers(named(fleet.objs, "Deployment", f"tandem-{role}"))[0]["livenessProbe"]
            reply = httpx.get(fleet.liveness(role), timeout=probe["timeoutSeconds"])
            assert reply.status_code == 200, f"{role}'s liveness probe fails while Redis hangs"
        probe = containers(named(fleet.objs, "Deployment", "tandem-api"))[0]["livenessProbe"]
        reply = httpx.get(
            f"http://127.0.0.1:{fleet.port['api']}/openapi.json", headers={"Host": f"{KUBELET}:8000"},
            timeout=probe["timeoutSeconds"],
        )  # fmt: skip
        assert reply.status_code == 200, "the API's liveness probe fails while Redis hangs"
    finally:
        fleet.redis.resume()
        gone = fleet.close()
    assert not gone, gone


def test_the_metrics_port_opens_only_once_the_broker_answers(image: Image, workdir: Path) -> None:
    """docs/kubernetes.md: "the metrics endpoint opens when the worker is ready to take work" (the
    startup probe waits for it while a broker unreachable at start is retried)."""
    objs = render("quickstart")
    address = loopback_address()
    pods = Pods(image, workdir, {"tandem-redis": address})
    cmd, env, port = pod_of(objs, "tools")
    redis = DataStore(address, workdir)
    try:
        pods.start("early-tools", cmd, env)
        wait_until(
            "a failed broker connection",
            lambda: "Cannot connect" in pods.log("early-tools").read_text(),
            pods,
        )
        assert not answers(f"http://127.0.0.1:{port}/metrics?name%5B%5D=python_info")(), (
            "metrics open before ready"
        )
        redis.start()
        wait_until(
            "the metrics endpoint", answers(f"http://127.0.0.1:{port}/metrics?name%5B%5D=python_info"), pods
        )
    finally:
        gone = pods.stop_all()
        redis.stop()
    assert not gone, gone


# -- docker compose ----------------------------------------------------------------------------------


COMPOSE_DOTENV = {
    "REDIS_PASSWORD": "long-random-redis-pass",
    "FLOWER_BASIC_AUTH": "ops:long-random-flower-pass",
    "TANDEM_API_TOKENS": TOKEN,
    "OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318",  # docs/tracing.md's example
}


def test_compose_runs_and_traces_a_job_as_its_services(image: Image, workdir: Path) -> None:
    services = compose_services(COMPOSE_DOTENV)
    address = loopback_address()
    redis = DataStore(address, workdir, password=COMPOSE_DOTENV["REDIS_PASSWORD"]).start()
    pods = Pods(image, workdir, {"redis": address, "jaeger": address})
    port = {"api": free_port()}
    try:
        with Collector(address) as collector:
            for name in (*ROLES, "api", "flower"):
                cmd = [str(w) for w in services[name]["command"]]
                if name == "api":
                    cmd[cmd.index("--port") + 1] = str(port["api"])
                if name == "flower":  # 5555 by default; compose's container owns it, here the machine does
                    cmd += ["--port", str(free_port())]
                pods.start(f"compose-{name}", cmd, service_env(services[name]))
            wait_until("compose's API", answers(f"http://127.0.0.1:{port['api']}/healthz"), pods)
            for name in (*ROLES, "api", "flower"):
                check = [str(w) for w in services[name]["healthcheck"]["test"][1:]]
                check = [w.replace("127.0.0.1:8000", f"127.0.0.1:{port['api']}") for w in check]
                done = pods.run(check, service_env(services[name]), timeout=60)
                assert done.returncode == 0, f"compose's {name} healthcheck: {done.stdout}{done.stderr}"
            # From the host, through the port compose publishes: `http://localhost:8000`.
            reply = api(
                port["api"], "POST", "/v1/jobs", "localhost:8000", json={"goal": GOAL, "max_rounds": 8}
            )
            assert reply.status_code == 202, reply.text
            job_id = reply.json()["id"]
            assert wait_final(port["api"], job_id, "localhost:8000")["status"]["state"] == "completed"

            def services_seen() -> set[str]:
                return {s.service for s in spans_of(collector, job_id)}

            wanted = {f"tandem-{n}" for n in (*ROLES, "api")}
            wait_until(
                "the job's spans from every service", lambda: wanted <= services_seen(), pods, timeout=120
            )
    finally:
        gone = pods.stop_all()
        redis.stop()
    assert not gone, gone


def test_composes_api_without_tokens_exits_saying_so(image: Image, workdir: Path) -> None:
    env = service_env(compose_services({**COMPOSE_DOTENV, "TANDEM_API_TOKENS": ""})["api"])
    assert env["TANDEM_API_TOKENS"] == ""
    pods = Pods(image, workdir, {"redis": loopback_address()})
    done = pods.run(["tandem", "api", "--host", "0.0.0.0", "--port", str(free_port())], env, timeout=120)
    assert done.returncode != 0 and "TANDEM_API_TOKENS" in done.stdout + done.stderr, (
        done.stdout + done.stderr
    )
