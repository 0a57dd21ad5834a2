"""deploy/kubernetes, checked: the manifests validate against Kubernetes' schemas
(kubernetes-validate, strict), they keep the promises docs/several-machines.md makes (grace
period over task.shutdown.ms, the container id from the pod's ordinal, probes on the health
endpoint, a volume for job.dir), and the pod's own command line, run here against tansu on
127.0.0.1, joins the job's group, answers its probes and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from kafka_helpers import create_topic, free_port, run

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
BIN = Path(sys.executable).parent


def _docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "statefulset.yaml").read_text()) if d]


def _pod() -> dict[str, Any]:
    (sts,) = [d for d in _docs() if d["kind"] == "StatefulSet"]
    return sts


def _args(container: dict[str, Any]) -> list[str]:
    return [str(a) for a in container["args"]]


def _config(args: list[str]) -> dict[str, str]:
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "-c")


def test_the_manifests_validate_strictly_against_kubernetes_schemas() -> None:
    proc = subprocess.run([str(BIN / "kubernetes-validate"), "--strict",
                           str(DEPLOY / "statefulset.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("passed") == 3, proc.stdout


def test_the_statefulset_keeps_the_promises_of_the_docs() -> None:
    sts = _pod()
    spec = sts["spec"]["template"]["spec"]
    (job,) = spec["containers"]
    args = _args(job)
    config = _config(args)
    # a pod asked to stop drains and commits within task.shutdown.ms, before it is killed
    assert spec["terminationGracePeriodSeconds"] * 1000 > int(config["task.shutdown.ms"])
    # the container id is the pod's ordinal: a static member of the job's group
    assert args[args.index("--container-id") + 1] == "$(POD_INDEX)"
    env = {e["name"]: e for e in job["env"]}
    assert env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] \
        == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert config["job.coordinator"] == "kafka" and "--follow" in args
    # job.dir on the pod's own volume, for host affinity
    (mount,) = job["volumeMounts"]
    assert config["job.dir"] == mount["mountPath"]
    assert mount["name"] in {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    # the probes ask the health endpoint the job serves
    port = config["job.health.port"]
    assert f"127.0.0.1:{port}/healthz" in " ".join(job["livenessProbe"]["exec"]["command"])
    assert f"127.0.0.1:{port}/ready" in " ".join(job["readinessProbe"]["exec"]["command"])
    # the image is built from the project's wheel
    docker = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^COPY deploy/kubernetes/dist/\*\.whl", docker, re.M), docker
    assert re.search(r"pip install /tmp/wheels/\*\.whl", docker), docker


def test_the_pods_command_joins_the_group_answers_its_probes_and_stops_on_sigterm(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    (job,) = _pod()["spec"]["template"]["spec"]["containers"]
    for topic, partitions in (("page-views", 4), ("logins", 2)):  # the app's inputs
        run(create_topic(kafka_bootstrap, topic, partitions))
    health, metrics = free_port(), free_port()
    env = {e["name"]: e.get("value") for e in job["env"]}
    env.update(POD_INDEX="0", KAFKA_BOOTSTRAP=kafka_bootstrap)
    args = []
    for a in job["args"]:  # the pod's own line, with this machine's folder and free ports
        a = re.sub(r"\$\((\w+)\)", lambda m: str(env[m.group(1)]), str(a))
        a = a.replace("job.dir=/var/lib/samza", f"job.dir={tmp_path / 'job'}")
        a = a.replace("job.health.port=8080", f"job.health.port={health}")
        a = a.replace("prometheus.host=0.0.0.0", "prometheus.host=127.0.0.1")
        args.append(a)
    args += ["-c", f"metrics.reporter.prometheus.port={metrics}", "-c",
             "systems.kafka.consumer.session.timeout.ms=3000", "-q"]

    def probe(kind: str) -> bool:
        command = [str(c).replace("8080", str(health))
                   for c in job[f"{kind}Probe"]["exec"]["command"]]
        command[0] = sys.executable
        return subprocess.run(command, capture_output=True, timeout=10).returncode == 0

    proc = subprocess.Popen([str(BIN / "samza-dsl"), *args], cwd=ROOT / "examples",
                            env={**os.environ, **{k: str(v) for k, v in env.items()}},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not probe("readiness"):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the pod never became ready"
            time.sleep(0.5)
        assert probe("liveness")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "group generation" in err, err
