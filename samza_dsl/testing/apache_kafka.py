"""Apache Kafka brokers for tests and benchmarks: the broker's own published jars (fetched once by
``./dev setup`` through Maven, ``.ci/apache-kafka/pom.xml``), started in KRaft mode on 127.0.0.1
on free ports, with their log dirs in a temporary folder.

    with ApacheKafkaBroker() as broker:          # one node: broker and controller
        run_against(broker.bootstrap)              # "127.0.0.1:PORT"

    with ApacheKafkaCluster(3) as cluster:         # three nodes, three controllers
        lost = cluster.leader_of("events", 0)      # the index of the node leading it
        cluster.kill(lost)                         # SIGKILL: a lost broker
        cluster.start_node(lost)                   # back, with its data

The jars are looked up in ``$SAMZA_DSL_KAFKA_LIB`` if set, else in
``$XDG_CACHE_HOME/samza-dsl/apache-kafka-<KAFKA_VERSION>/lib`` (``~/.cache`` by default), where
``./dev setup`` puts them. Nothing is downloaded here: a missing jar directory is a
``KafkaBrokerError`` that says how to fetch it.

The brokers differ from Kafka's defaults in what a test bed needs, and say so in their config:
``group.initial.rebalance.delay.ms=0`` (a group's first rebalance does not wait 3 s for more
members), ``group.min.session.timeout.ms=1000`` (the tests' groups use session timeouts of a few
seconds, below Kafka's 6 s floor), replication factors of the internal topics no larger than the cluster, and a 512 MiB
heap at most.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .kafka_broker import HOST, KafkaBrokerError, answers, free_port, log_tail

__all__ = ["ApacheKafkaBroker", "ApacheKafkaCluster", "KAFKA_VERSION", "kafka_lib",
           "FETCH_HINT"]

#: the broker's version; .ci/apache-kafka/pom.xml pins the same (a test checks they agree)
KAFKA_VERSION = "4.1.1"
FETCH_HINT = ("fetch Apache Kafka's jars with ./dev setup (it runs mvn dependency:copy-dependencies "
              "in .ci/apache-kafka), or set SAMZA_DSL_KAFKA_LIB to a directory holding them")
#: the JVM's heap: at most this much
HEAP = "512m"
#: JVM options for a quick start on a small machine: the client compiler only (about half the
#: CPU a start takes); the benchmarks pass ``jvm_options=[]``
QUICK_START = ["-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=2"]

_LOG4J2 = """\
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{path}" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.raft" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


def kafka_lib() -> Path:
    """The directory of Apache Kafka's jars.

    Raises:
        KafkaBrokerError: it is not there (with how to fetch it).
    """
    given = os.environ.get("SAMZA_DSL_KAFKA_LIB")
    if given:
        lib = Path(given)
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        lib = cache / "samza-dsl" / f"apache-kafka-{KAFKA_VERSION}" / "lib"
    if not (lib / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        raise KafkaBrokerError(f"Apache Kafka {KAFKA_VERSION}'s jars are not in {lib}: "
                               f"{FETCH_HINT}")
    return lib


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else None
    if java is not None and java.is_file():
        return str(java)
    found = shutil.which("java")
    if found is None:
        raise KafkaBrokerError("no java on this machine: Apache Kafka 4 needs Java 17 or newer "
                               "(apt-get install openjdk-17-jre-headless)")
    return found


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding, as Kafka's own."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


#: the cluster id of the formatted log dirs every test cluster starts from
FORMATTED_CLUSTER_ID = "c2FtemEtZHNsLXRlc3RzAA"


class _Node:
    """One KRaft node (broker and controller) of a cluster: its ports, folder and process."""

    def __init__(self, node_id: int, root: Path) -> None:
        self.node_id = node_id
        self.port = free_port()
        self.controller_port = free_port()
        self.dir = root / f"node-{node_id}"
        self.data = self.dir / "data"
        self.log = self.dir / "broker.log"
        self.config = self.dir / "server.properties"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ApacheKafkaCluster:
    """``n`` Apache Kafka nodes in KRaft mode, each a broker and a controller, on 127.0.0.1.

    Args:
        n: How many nodes (1 or 3 in the tests).
        settings: More broker settings (``server.properties`` keys), for every node.
        start_timeout: Seconds until every node answers a metadata request.
        stop_timeout: Seconds after SIGTERM (a controlled shutdown) before a node is killed.
        root: Where the nodes' folders go; by default a temporary folder that ``stop()`` removes.

    Attributes:
        nodes: The nodes, by index (node ids are index + 1).
        startup_seconds: How long the last ``start()`` took.
    """

    def __init__(self, n: int = 1, *, settings: Mapping[str, Any] | None = None,
                 start_timeout: float = 60.0, stop_timeout: float = 20.0,
                 root: str | os.PathLike[str] | None = None,
                 jvm_options: list[str] | None = None) -> None:
        if n < 1:
            raise ValueError(f"a cluster has at least one node, got {n}")
        self.n = n
        self.settings = dict(settings or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._given_root = None if root is None else Path(root)
        self._root: Path | None = None
        self.nodes: list[_Node] = []
        self.cluster_id = FORMATTED_CLUSTER_ID
        self.startup_seconds: float | None = None
        #: more JVM options (the benchmarks run without the tests' quicker start)
        self.jvm_options: list[str] = list(jvm_options) if jvm_options is not None \
            else QUICK_START

    @property
    def bootstrap(self) -> str:
        """Every node's ``127.0.0.1:PORT``, comma-separated, for ``bootstrap_servers``."""
        if not self.nodes:
            raise KafkaBrokerError("the Apache Kafka cluster has not been started")
        return ",".join(node.bootstrap for node in self.nodes)

    def _properties(self, node: _Node) -> dict[str, Any]:
        replicas = min(3, self.n)
        voters = ",".join(f"{m.node_id}@{HOST}:{m.controller_port}" for m in self.nodes)
        props: dict[str, Any] = {
            "process.roles": "broker,controller",
            "node.id": node.node_id,
            # a static quorum: the formatted log dirs hold no address, so one formatted copy
            # (``_formatted``) serves every start on any ports
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:"
                         f"{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:"
                                    f"{node.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(node.data),
            "num.partitions": 1,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min(2, replicas),
            "transaction.state.log.num.partitions": 10,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min(2, replicas),
            # a test bed: a group's first rebalance does not wait 3 s for more members, and
            # groups may run with session timeouts of a second or two (Kafka's floor is 6 s)
            "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 1000,
            "log.segment.bytes": 16 * 1024 * 1024,
        }
        props.update(self.settings)
        return props

    def _write_config(self, node: _Node) -> None:
        node.dir.mkdir(parents=True, exist_ok=True)
        lines = [f"{k}={v}" for k, v in self._properties(node).items()]
        node.config.write_text("\n".join(lines) + "\n")
        (node.dir / "log4j2.xml").write_text(_LOG4J2.format(path=node.log))

    def _java_cmd(self, node: _Node, main: str, *args: str) -> list[str]:
        lib = kafka_lib()
        return [_java(), f"-Xmx{HEAP}", "-Xms128m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                *self.jvm_options,
                f"-Dlog4j2.configurationFile={node.dir / 'log4j2.xml'}",
                f"-Dkafka.logs.dir={node.dir}", "-cp", f"{lib}/*", main, *args]

    #: what the formatted templates' names begin with (a kind of broker formats its own)
    template_prefix = "formatted"

    def _format_args(self) -> list[str]:
        """More arguments of ``kafka-storage format`` (users written at format time)."""
        return []

    def _format(self, node: _Node) -> None:
        """The node's log dir, as ``kafka-storage format`` makes it: a copy of one formatted
        once per machine for this node of a cluster of this size (a JVM start saved)."""
        template = kafka_lib().parent / f"{self.template_prefix}-{self.n}-{node.node_id}"
        if not (template / "meta.properties").is_file():
            work = Path(tempfile.mkdtemp(prefix=f"format-{node.node_id}-", dir=template.parent))
            config = work / "server.properties"
            props = {**self._properties(node), "log.dirs": str(work / "data")}
            config.write_text("\n".join(f"{k}={v}" for k, v in props.items()) + "\n")
            done = subprocess.run(
                self._java_cmd(node, "kafka.tools.StorageTool", "format", "-t",
                               FORMATTED_CLUSTER_ID, "-c", str(config), *self._format_args()),
                capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                shutil.rmtree(work, ignore_errors=True)
                raise KafkaBrokerError(
                    f"formatting Apache Kafka node {node.node_id}'s log dir failed "
                    f"({done.returncode}): {done.stderr.strip()[-2000:]}"
                    f"{done.stdout.strip()[-1000:]}")
            with contextlib.suppress(OSError):  # another process made it first: take theirs
                os.rename(work / "data", template)
            shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(template, node.data)

    def start(self) -> ApacheKafkaCluster:
        """Format every node's log dir, start them and wait until each answers.

        Raises:
            KafkaBrokerError: The jars or Java are missing, or a node did not answer in time
                (with its log's last lines).
        """
        if self.nodes:
            raise KafkaBrokerError(f"the Apache Kafka cluster is already running on "
                                   f"{self.bootstrap}")
        kafka_lib()
        started = time.monotonic()
        self._root = self._given_root or Path(tempfile.mkdtemp(prefix="apache-kafka-"))
        self.nodes = [_Node(i + 1, self._root) for i in range(self.n)]
        try:
            for node in self.nodes:
                self._write_config(node)
            for node in self.nodes:
                self._format(node)
            for node in self.nodes:
                self._launch(node)
            deadline = time.monotonic() + self.start_timeout
            for node in self.nodes:
                self._wait(node, deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _launch(self, node: _Node) -> None:
        with node.log.open("ab") as out:
            out.write(f"--- starting Apache Kafka {KAFKA_VERSION} node {node.node_id} on "
                      f"{node.bootstrap}\n".encode())
            out.flush()
            node.proc = subprocess.Popen(
                self._java_cmd(node, "kafka.Kafka", str(node.config)),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def _wait(self, node: _Node, deadline: float) -> None:
        while time.monotonic() < deadline:
            if node.proc is not None and node.proc.poll() is not None:
                raise KafkaBrokerError(
                    f"Apache Kafka node {node.node_id} exited with code {node.proc.returncode} "
                    f"before answering on {node.bootstrap}; log {node.log}, last lines:\n"
                    f"{log_tail(node.log)}")
            if answers(node.bootstrap):
                return
            time.sleep(0.2)
        raise KafkaBrokerError(
            f"Apache Kafka node {node.node_id} did not answer a metadata request on "
            f"{node.bootstrap} within {self.start_timeout:g} s; log {node.log}, last lines:\n"
            f"{log_tail(node.log)}")

    def leader_of(self, topic: str, partition: int = 0, timeout: float = 30.0) -> int:
        """The index (in ``nodes``, for ``kill`` and ``start_node``) of the node leading
        ``partition`` of ``topic`` now, as a node that is up says; waited for while the
        partition has no leader.

        Raises:
            KafkaBrokerError: no node up names a leader within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        ids = {node.node_id: i for i, node in enumerate(self.nodes)}
        while True:
            up = ",".join(node.bootstrap for node in self.nodes if node.alive())
            leader = asyncio.run(_leader(up, topic, partition)) if up else None
            if leader in ids:
                return ids[leader]
            if time.monotonic() >= deadline:
                raise KafkaBrokerError(
                    f"no node of the Apache Kafka cluster on {self.bootstrap} named a leader of "
                    f"topic {topic!r} partition {partition} within {timeout:g} s")
            time.sleep(0.2)

    def kill(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL by default: a lost broker) to node ``index`` and wait for it
        to end (not for SIGSTOP)."""
        node = self.nodes[index]
        if node.proc is None or node.proc.poll() is not None:
            return
        node.proc.send_signal(sig)
        if sig not in (signal.SIGSTOP, signal.SIGCONT):
            node.proc.wait(self.stop_timeout)

    def start_node(self, index: int, timeout: float | None = None) -> None:
        """Start node ``index`` again, with its data, on its ports; wait until it answers."""
        node = self.nodes[index]
        if node.alive():
            raise KafkaBrokerError(f"Apache Kafka node {node.node_id} is running")
        self._launch(node)
        self._wait(node, time.monotonic() + (timeout or self.start_timeout))

    def stop(self) -> None:
        """Stop every node; removes their folders when they were in a temporary one. The nodes
        are told to stop all at once: one by one, the last node's controlled shutdown waits for
        a quorum that has gone, until ``stop_timeout`` ends it."""
        procs = [node.proc for node in self.nodes if node.proc is not None]
        for node in self.nodes:
            node.proc = None
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.terminate()
        deadline = time.monotonic() + self.stop_timeout
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._root is not None and self._given_root is None:
            shutil.rmtree(self._root, ignore_errors=True)
        self._root = None
        self.nodes = []

    def __enter__(self) -> ApacheKafkaCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


async def _leader(bootstrap: str, topic: str, partition: int) -> int | None:
    """The node id leading the partition as the metadata says (None: none, or no answer)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000)
    try:
        await admin.start()
        # every topic's metadata: one request naming a missing topic would create it
        for entry in await admin.describe_topics():
            for part in entry["partitions"] if entry["topic"] == topic else ():
                if part["partition"] == partition and part["leader"] >= 0:
                    return int(part["leader"])
        return None
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


class ApacheKafkaBroker(ApacheKafkaCluster):
    """One Apache Kafka node (broker and controller in one process) on 127.0.0.1."""

    def __init__(self, *, settings: Mapping[str, Any] | None = None,
                 start_timeout: float = 60.0, stop_timeout: float = 20.0,
                 root: str | os.PathLike[str] | None = None,
                 jvm_options: list[str] | None = None) -> None:
        super().__init__(1, settings=settings, start_timeout=start_timeout,
                         stop_timeout=stop_timeout, root=root, jvm_options=jvm_options)

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def log(self) -> Path:
        return self.nodes[0].log

    def __enter__(self) -> ApacheKafkaBroker:
        self.start()
        return self


def main(argv: list[str] | None = None) -> int:
    """``python -m samza_dsl.testing.apache_kafka [--nodes N] [--tansu]``: a local broker to try
    a job against, until Ctrl-C (``./dev broker`` runs this)."""
    import argparse

    from .kafka_broker import TansuBroker

    parser = argparse.ArgumentParser(
        prog="python -m samza_dsl.testing.apache_kafka",
        description="Start a Kafka broker on 127.0.0.1 until Ctrl-C: Apache Kafka "
                    f"{KAFKA_VERSION} in KRaft mode (from the jars ./dev setup fetched), or "
                    "tansu (in memory, starts in well under a second)")
    parser.add_argument("--nodes", type=int, default=1, help="Apache Kafka nodes (default 1)")
    parser.add_argument("--tansu", action="store_true", help="tansu instead of Apache Kafka")
    args = parser.parse_args(argv)
    broker: ApacheKafkaCluster | TansuBroker = (
        TansuBroker() if args.tansu else ApacheKafkaCluster(args.nodes, jvm_options=[]))
    try:
        broker.start()
    except KafkaBrokerError as exc:
        print(f"error: {exc}", flush=True)
        return 1
    what = "tansu (in memory)" if args.tansu else \
        f"Apache Kafka {KAFKA_VERSION} ({args.nodes} node(s), KRaft)"
    print(f"{what} on {broker.bootstrap}: KafkaSystem('kafka', bootstrap_servers="
          f"'{broker.bootstrap}'); Ctrl-C stops it (its data goes with it)", flush=True)
    def stop_on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_on_term)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
