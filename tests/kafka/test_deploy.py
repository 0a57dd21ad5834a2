"""deploy/kubernetes, checked: the manifests validate against Kubernetes' schemas
(kubernetes-validate, strict), they keep the promises docs/several-machines.md makes (grace
period over task.shutdown.ms, the container id from the pod's ordinal, probes on the health
endpoint, a volume for job.dir), the pod meets the "restricted" Pod Security Standard (checked
here, rule by rule, from the standard's text), it is hardened past it (read-only root, CPU limit,
no service-account token, a NetworkPolicy, a base image pinned by digest), and the pod's own
command line, run here under strace against tansu on 127.0.0.1, joins the job's group, answers
its probes, writes only where the pod has volumes and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
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
    assert proc.stdout.count("passed") == 4, proc.stdout


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
    (mount,) = [m for m in job["volumeMounts"] if m["mountPath"] == config["job.dir"]]
    assert mount["name"] in {t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]}
    # the probes ask the health endpoint the job serves
    port = config["job.health.port"]
    assert f"127.0.0.1:{port}/healthz" in " ".join(job["livenessProbe"]["exec"]["command"])
    assert f"127.0.0.1:{port}/ready" in " ".join(job["readinessProbe"]["exec"]["command"])
    # the image is built from the project's wheel
    docker = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^COPY deploy/kubernetes/dist/\*\.whl", docker, re.M), docker
    assert re.search(r"pip install /tmp/wheels/\*\.whl", docker), docker


# The Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/),
# the "restricted" profile: every control of "baseline", then its own. Each rule names the fields
# it constrains, as the standard's tables do.
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                         "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID",
                         "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
RESTRICTED_VOLUME_SOURCES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                             "persistentVolumeClaim", "projected", "secret"}


def restricted_violations(metadata: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """What a pod (its template's metadata and spec) breaks of the restricted standard, one line a
    rule and field; ``[]`` when it meets it."""
    out: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    containers = [(f"{kind}[{c.get('name')}]", c) for kind in
                  ("containers", "initContainers", "ephemeralContainers")
                  for c in spec.get(kind) or []]

    def sc(c: dict[str, Any]) -> dict[str, Any]:
        return c.get("securityContext") or {}

    # baseline: HostProcess
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        out.append("HostProcess: spec.securityContext.windowsOptions.hostProcess")
    # baseline: Host Namespaces
    out += [f"Host Namespaces: spec.{f}" for f in ("hostNetwork", "hostPID", "hostIPC")
            if spec.get(f)]
    # baseline: HostPath Volumes; restricted: Volume Types
    for v in spec.get("volumes") or []:
        if "hostPath" in v:
            out.append(f"HostPath Volumes: spec.volumes[{v['name']}].hostPath")
        sources = set(v) - {"name"}
        if not sources <= RESTRICTED_VOLUME_SOURCES:
            out.append(f"Volume Types: spec.volumes[{v['name']}] is {sorted(sources)}")
    # baseline: AppArmor (annotations and fields), SELinux, Seccomp, Sysctls at the pod level
    for key, value in (metadata.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value == "runtime/default" or value.startswith("localhost/")):
            out.append(f"AppArmor: metadata.annotations[{key}] = {value}")
    for where, context in [("spec.securityContext", pod_sc)] + [
            (f"spec.{name}.securityContext", sc(c)) for name, c in containers]:
        apparmor = (context.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            out.append(f"AppArmor: {where}.appArmorProfile.type = {apparmor}")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES:
            out.append(f"SELinux: {where}.seLinuxOptions.type = {selinux['type']}")
        out += [f"SELinux: {where}.seLinuxOptions.{f}" for f in ("user", "role")
                if selinux.get(f)]
        # restricted: Running as Non-root user
        if context.get("runAsUser") == 0:
            out.append(f"Running as Non-root user: {where}.runAsUser = 0")
    seccomp_types = {"RuntimeDefault", "Localhost"}
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in seccomp_types:
        out.append(f"Seccomp: spec.securityContext.seccompProfile.type = {pod_seccomp}")
    out += [f"Sysctls: spec.securityContext.sysctls[{s['name']}]"
            for s in pod_sc.get("sysctls") or [] if s["name"] not in SAFE_SYSCTLS]
    for name, c in containers:
        where, context = f"spec.{name}", sc(c)
        # baseline: HostProcess, Privileged Containers, /proc Mount Type
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"HostProcess: {where}.securityContext.windowsOptions.hostProcess")
        if context.get("privileged"):
            out.append(f"Privileged Containers: {where}.securityContext.privileged")
        if context.get("procMount", "Default") != "Default":
            out.append(f"/proc Mount Type: {where}.securityContext.procMount")
        # baseline: Host Ports
        out += [f"Host Ports: {where}.ports[{p.get('name')}].hostPort"
                for p in c.get("ports") or [] if p.get("hostPort", 0)]
        # baseline: Host Probes / Lifecycle Hooks
        hooks = [(f"{probe}", c.get(probe) or {}) for probe in
                 ("livenessProbe", "readinessProbe", "startupProbe")]
        hooks += [(f"lifecycle.{h}", (c.get("lifecycle") or {}).get(h) or {})
                  for h in ("postStart", "preStop")]
        out += [f"Host Probes / Lifecycle Hooks: {where}.{hook}.{handler}.host"
                for hook, body in hooks for handler in ("httpGet", "tcpSocket")
                if (body.get(handler) or {}).get("host")]
        # restricted: Privilege Escalation (must be set, to false)
        if context.get("allowPrivilegeEscalation") is not False:
            out.append(f"Privilege Escalation: {where}.securityContext.allowPrivilegeEscalation"
                       f" is {context.get('allowPrivilegeEscalation')}, not false")
        # restricted: Running as Non-root (the container's, or else the pod's, true)
        if context.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            out.append(f"Running as Non-root: {where}.securityContext.runAsNonRoot not true")
        # restricted: Seccomp (the container's, or else the pod's, RuntimeDefault or Localhost)
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in seccomp_types:
            out.append(f"Seccomp: {where}.securityContext.seccompProfile.type = {seccomp}")
        # baseline and restricted: Capabilities (drop ALL; add NET_BIND_SERVICE at most)
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            out.append(f"Capabilities: {where}.securityContext.capabilities.drop lacks ALL")
        added = set(capabilities.get("add") or [])
        if not added <= BASELINE_CAPABILITIES:
            out.append(f"Capabilities: {where} adds {sorted(added - BASELINE_CAPABILITIES)}")
        if not added <= {"NET_BIND_SERVICE"}:
            out.append(f"Capabilities: {where}.securityContext.capabilities.add = "
                       f"{sorted(added)}")
    return out


def _pod_of(sts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metadata and spec of the pods a StatefulSet makes: its template, with a volume for
    each claim template."""
    template = sts["spec"]["template"]
    spec = dict(template["spec"])
    spec["volumes"] = list(spec.get("volumes") or []) + [
        {"name": t["metadata"]["name"], "persistentVolumeClaim": {"claimName": "claim"}}
        for t in sts["spec"].get("volumeClaimTemplates") or []]
    return template.get("metadata") or {}, spec


def test_the_pod_meets_the_restricted_pod_security_standard() -> None:
    assert restricted_violations(*_pod_of(_pod())) == []


def test_the_restricted_check_names_what_a_pod_breaks() -> None:
    # the check itself, on a pod that breaks one field of each rule
    bad = {"hostNetwork": True, "securityContext": {"runAsUser": 0, "sysctls": [
        {"name": "kernel.msgmax", "value": "1"}], "seccompProfile": {"type": "Unconfined"}},
           "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
           "containers": [{"name": "job", "ports": [{"name": "m", "containerPort": 1,
                                                     "hostPort": 1}],
                           "livenessProbe": {"tcpSocket": {"port": 1, "host": "10.0.0.1"}},
                           "securityContext": {"privileged": True, "procMount": "Unmasked",
                                               "capabilities": {"add": ["SYS_ADMIN"]},
                                               "seLinuxOptions": {"type": "spc_t"}}}]}
    rules = {v.split(":")[0] for v in restricted_violations({}, bad)}
    assert rules == {"Host Namespaces", "Running as Non-root user", "Sysctls", "Seccomp",
                     "HostPath Volumes", "Volume Types", "Host Ports",
                     "Host Probes / Lifecycle Hooks", "Privileged Containers",
                     "/proc Mount Type", "Capabilities", "SELinux", "Privilege Escalation",
                     "Running as Non-root"}, rules


def test_the_pod_is_hardened_past_the_standard() -> None:
    metadata, spec = _pod_of(_pod())
    (job,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False  # the job never calls the API server
    assert job["securityContext"]["readOnlyRootFilesystem"] is True
    assert set(job["resources"]["limits"]) == {"cpu", "memory"}
    # with a read-only root, every place the job writes is a volume: job.dir and /tmp; the
    # Kafka credentials are a Secret's, mounted read-only
    mounts = {m["mountPath"]: m["name"] for m in job["volumeMounts"]}
    writable = {m["mountPath"] for m in job["volumeMounts"] if not m.get("readOnly")}
    assert writable == {_config(_args(job))["job.dir"], "/tmp"}
    assert {v["name"] for v in spec["volumes"]} == set(mounts.values())
    for mount in job["volumeMounts"]:
        if mount.get("readOnly"):
            (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
            assert set(volume) == {"name", "secret"}, volume
    # the image: its base pinned by digest, run as the numeric non-root user the pod names
    docker = (DEPLOY / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM (\S+)", docker, re.M)
    assert re.fullmatch(r"python:3\.11-slim@sha256:[0-9a-f]{64}", base), base
    assert re.search(rf"^USER {spec['securityContext']['runAsUser']}:", docker, re.M), docker
    assert "PYTHONDONTWRITEBYTECODE=1" in docker  # nothing written beside the code at run time


def test_a_network_policy_lets_in_only_metrics_scrapes_and_out_only_dns_and_kafka() -> None:
    (policy,) = [d for d in _docs() if d["kind"] == "NetworkPolicy"]
    sts = _pod()
    assert policy["spec"]["podSelector"]["matchLabels"] \
        == sts["spec"]["template"]["metadata"]["labels"]
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    (job,) = sts["spec"]["template"]["spec"]["containers"]
    (scrape,) = policy["spec"]["ingress"]
    assert [p["port"] for p in scrape["ports"]] == [p["name"] for p in job["ports"]] \
        == ["metrics"]
    assert scrape["from"] and all("ipBlock" not in f for f in scrape["from"])
    egress = {(p["protocol"], p["port"]) for rule in policy["spec"]["egress"]
              for p in rule["ports"]}
    bootstrap = {e["name"]: e.get("value") for e in job["env"]}["KAFKA_BOOTSTRAP"]
    assert egress == {("UDP", 53), ("TCP", 53), ("TCP", int(bootstrap.rsplit(":", 1)[1]))}
    assert all(rule.get("to") for rule in policy["spec"]["egress"])


# what the job's process may do to a file: create, open for writing, move, remove (strace -e)
WRITE_CALLS = ("open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,link,linkat,"
               "symlink,symlinkat,unlink,unlinkat,rmdir,truncate")
WRITE_FLAGS = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC")


def _written_paths(trace: str, cwd: Path) -> set[str]:
    """Every path a ``strace -f -y`` trace shows the job creating, writing, moving or removing,
    made absolute (successful calls and refused ones: a read-only root refuses them all)."""
    out: set[str] = set()
    for line in trace.splitlines():
        call = re.match(r"\d+\s+(\w+)\((.*)\)\s+= ", line)
        if call is None:
            continue
        name, rest = call.groups()
        if name.startswith("open") and not WRITE_FLAGS.search(rest):
            continue
        # each "<dirfd's path>" or AT_FDCWD before a quoted path names where it is resolved
        for base, path in re.findall(r'(?:(AT_FDCWD|\d+<[^>]*>), )?"([^"]*)"', rest):
            if not path.startswith("/"):
                folder = str(cwd) if base in ("", "AT_FDCWD") else base[base.index("<") + 1:-1]
                path = f"{folder}/{path}"
            out.add(os.path.normpath(path))
    return out


SECRET_MOUNT = "/etc/samza/kafka"


def login_args(args: list[str]) -> tuple[list[str], list[str]]:
    """The pod's arguments without its Kafka login (``-c systems.kafka.security.*``, ``sasl.*``,
    ``ssl.*``), and the login's."""
    rest: list[str] = []
    login: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "-c" and args[i + 1].startswith(("systems.kafka.security.",
                                                       "systems.kafka.sasl.",
                                                       "systems.kafka.ssl.")):
            login += args[i:i + 2]
            i += 2
            continue
        rest.append(args[i])
        i += 1
    return rest, login


def test_the_pods_kafka_credentials_come_from_a_secret() -> None:
    """The user from the Secret as an environment variable, the password and the CA as files
    of the Secret mounted read-only; the manifest holds no credential."""
    sts = _pod()
    spec = sts["spec"]["template"]["spec"]
    (job,) = spec["containers"]
    config = _config(_args(job))
    assert config["systems.kafka.security.protocol"] == "SASL_SSL"
    assert config["systems.kafka.sasl.username"] == "$(KAFKA_USERNAME)"
    env = {e["name"]: e for e in job["env"]}
    secret = env["KAFKA_USERNAME"]["valueFrom"]["secretKeyRef"]["name"]
    (mount,) = [m for m in job["volumeMounts"] if m["mountPath"] == SECRET_MOUNT]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert mount["readOnly"] is True and volume["secret"]["secretName"] == secret
    files = {item["path"] for item in volume["secret"]["items"]}
    assert config["systems.kafka.sasl.password"] == f"file:{SECRET_MOUNT}/password"
    assert config["systems.kafka.ssl.cafile"] == f"{SECRET_MOUNT}/ca.crt"
    assert files == {"password", "ca.crt"}
    assert all(d["kind"] != "Secret" for d in _docs()), "credentials are not in the manifests"


def test_the_pods_command_joins_the_group_answers_its_probes_and_stops_on_sigterm(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    pod = _pod()["spec"]["template"]["spec"]
    (job,) = pod["containers"]
    for topic, partitions in (("page-views", 4), ("logins", 2)):  # the app's inputs
        run(create_topic(kafka_bootstrap, topic, partitions))
    health, metrics = free_port(), free_port()
    env = {e["name"]: e.get("value") for e in job["env"]}
    # the image's environment (Dockerfile ENV), /tmp's emptyDir here a folder of the test's
    env.update(POD_INDEX="0", KAFKA_BOOTSTRAP=kafka_bootstrap, PYTHONDONTWRITEBYTECODE="1",
               PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path / "tmp"))
    # the Secret's mount is there, read only; the test brokers speak plain text, so the pod's
    # Kafka login is left out here (test_kafka_secured.py logs in with it)
    volumes = {"/var/lib/samza": tmp_path / "job", "/tmp": tmp_path / "tmp",
               SECRET_MOUNT: tmp_path / "secret"}
    for folder in volumes.values():  # mounted before the pod starts
        folder.mkdir()
    assert set(volumes) == {m["mountPath"] for m in job["volumeMounts"]}
    args = []
    for a in login_args(_args(job))[0]:  # the pod's own line, this machine's folder and ports
        a = re.sub(r"\$\((\w+)\)", lambda m: str(env[m.group(1)]), str(a))
        a = a.replace("job.dir=/var/lib/samza", f"job.dir={volumes['/var/lib/samza']}")
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

    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is not installed: apt-get install strace (./dev setup does)",
                    pytrace=False)
    trace, cwd = tmp_path / "strace.txt", ROOT / "examples"
    proc = subprocess.Popen([strace, "-f", "-qq", "-y", "-o", str(trace), "-e",
                             f"trace={WRITE_CALLS}", str(BIN / "samza-dsl"), *args], cwd=cwd,
                            env={**os.environ, **{k: str(v) for k, v in env.items()}},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not probe("readiness"):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the pod never became ready"
            time.sleep(0.5)
        assert probe("liveness")
        # the metrics endpoint answers a scrape (and the job writes nothing for it)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as r:
            assert r.status == 200
    finally:
        # SIGTERM to the job (strace's child), as the kubelet sends it; strace exits with it
        (child,) = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        os.kill(int(child), signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "group generation" in err, err
    # a read-only root filesystem: the job writes only on the pod's volumes
    allowed = tuple(f"{folder}/" for folder in volumes.values()) + ("/dev/", "/proc/")
    outside = sorted(p for p in _written_paths(trace.read_text(), cwd)
                     if not (p + "/").startswith(allowed))
    assert outside == [], f"the job writes outside its volumes {sorted(volumes)}: {outside}"
    assert any(p.startswith(f"{volumes['/var/lib/samza']}/")
               for p in _written_paths(trace.read_text(), cwd))
