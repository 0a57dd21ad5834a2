"""Spark in local mode listens on 127.0.0.1 only: the driver's JVM, seen through its own listening
sockets (psutil), in the test session and under ``samza-dsl reprocess --master local[2]``;
cluster masters are left to Spark. The user's ``spark.driver.extraJavaOptions`` reach the
driver's JVM."""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
from test_spark_cli import APP, CLI, REPO, example, write_jsonl

from runtime.spark.runner import session_settings


def _listening(proc: psutil.Process) -> set[tuple[str, int]]:
    """(address, port) of each socket ``proc`` listens on; Java's dual-stack sockets show an
    IPv4 address as IPv6 (``::ffff:127.0.0.1``): given here as IPv4."""
    out = set()
    for c in proc.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN:
            ip = ipaddress.ip_address(c.laddr.ip)
            mapped = getattr(ip, "ipv4_mapped", None)
            out.add((str(mapped or ip), c.laddr.port))
    return out


def _jvms(root: psutil.Process) -> list[psutil.Process]:
    out = []
    for p in root.children(recursive=True):
        try:
            if p.name() == "java":
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def test_the_sessions_jvm_listens_on_loopback_only(spark: Any) -> None:
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    assert gateway is not None and spark.sparkContext.master.startswith("local")
    jvm = psutil.Process(gateway.proc.pid)
    spark.range(10).count()  # a job: its block manager and RPC are up
    sockets = _listening(jvm)
    assert sockets, "the JVM listens on nothing?"
    assert {ip for ip, _ in sockets} == {"127.0.0.1"}, sockets
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert conf.get("spark.driver.host") == "127.0.0.1"


def test_reprocess_on_a_local_master_listens_on_loopback_only(tmp_path: Path) -> None:
    views = write_jsonl(tmp_path / "views.jsonl", example.sample_input(500, seed=4))
    target = tmp_path / "counts.jsonl"
    proc = subprocess.Popen([str(CLI), "reprocess", APP, "--master", "local[2]", "--input",
                             f"page-views={views}", "--output", f"country-counts={target}",
                             "--no-progress", "--conf",
                             "spark.driver.extraJavaOptions=-Dsamza.dsl.test='a b'"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[tuple[str, int]] = set()
    argvs: list[list[str]] = []
    root = psutil.Process(proc.pid)
    deadline = time.monotonic() + 300
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            for jvm in _jvms(root):
                with contextlib.suppress(psutil.NoSuchProcess):
                    seen |= _listening(jvm)
                    argv = jvm.cmdline()
                    # the driver's, not the launcher spark-class runs first to build its command
                    if "org.apache.spark.launcher.Main" not in argv:
                        argvs.append(argv)
            time.sleep(0.25)
    finally:
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert target.exists()
    # the driver's RPC and block manager at least, each seen while the session was up
    assert len(seen) >= 2, f"saw {seen} while it ran: {err}"
    assert {ip for ip, _ in seen} == {"127.0.0.1"}, seen
    # the user's JVM options reach the driver's JVM beside the runtime's log configuration
    assert argvs and all("-Dsamza.dsl.test=a b" in argv for argv in argvs), argvs[:1]
    assert all(any(a.startswith("-Dlog4j2.configurationFile=") for a in argv) for argv in argvs)


def test_a_users_driver_address_and_cluster_masters_are_left_alone() -> None:
    mine = session_settings("local[2]", conf={"spark.driver.host": "myhost",
                                              "spark.driver.bindAddress": "0.0.0.0"})
    assert mine["spark.driver.host"] == "myhost"
    assert mine["spark.driver.bindAddress"] == "0.0.0.0"
    for master in ("local", "local[*]", "local[2]"):
        s = session_settings(master)
        assert (s["spark.driver.host"], s["spark.driver.bindAddress"]) == ("127.0.0.1",) * 2
    for master in ("spark://127.0.0.1:7077", "yarn", "k8s://https://127.0.0.1:6443", None):
        s = session_settings(master)
        assert "spark.driver.host" not in s and "spark.driver.bindAddress" not in s, master
