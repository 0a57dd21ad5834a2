"""The health endpoint of a group member (``job.coordinator=kafka``): ``/ready`` is 200 only
once the group has dealt the member its tasks and their stores are restored, each member of
two answers for its own share, and it is 503 from the start of a rebalance, and from the moment
a member that was fenced runs again, until the member's new share runs (tansu on 127.0.0.1,
real processes)."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from group_helpers import SESSION_MS, Member, settled, wait_for
from kafka_helpers import create_topic, free_port, run


def _ready(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return 0, {}


def test_each_member_is_ready_once_its_share_of_tasks_runs(kafka_bootstrap: str,
                                                           tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    ports = [free_port(), free_port()]
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, "-c",
                      f"job.health.port={ports[i]}") for i in range(2)]
    try:
        wait_for("two members split the tasks", lambda: settled(members, 4), 60, members)
        wait_for("both members are ready", lambda: all(_ready(p)[0] == 200 for p in ports),
                 30, members)
        bodies = [_ready(p)[1] for p in ports]
        assert [b["tasks"] for b in bodies] == [2, 2], bodies
        assert all(b["state"] == "running" for b in bodies), bodies
    finally:
        codes = [m.stop() for m in members]
    assert codes == [0, 0], [m.text()[-2000:] for m in members]
    assert all(_ready(p)[0] == 0 for p in ports)  # closed with the member


def _probing(port: int, stop: threading.Event, seen: list[tuple[int, int]]) -> None:
    """Ask ``/ready`` again and again (every 2 ms) until ``stop``: (status, tasks) of each
    answer. On Apache Kafka a member's rebalance that moves no store ends within some 20 ms:
    the probes come often enough to see its 503."""
    while not stop.is_set():
        status, body = _ready(port)
        if status:
            seen.append((status, int(body.get("tasks", -1))))  # type: ignore[call-overload]
        time.sleep(0.002)


def test_ready_is_503_from_the_start_of_a_rebalance_until_the_new_share_runs(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    port = free_port()
    first = Member(tmp_path / "host-0", kafka_bootstrap, tag, "-c", f"job.health.port={port}")
    members = [first]
    stop = threading.Event()
    seen: list[tuple[int, int]] = []
    prober = threading.Thread(target=_probing, args=(port, stop, seen), daemon=True)
    try:
        wait_for("the first member runs every task", lambda: settled(members, 4), 60, members)
        wait_for("it is ready", lambda: _ready(port)[0] == 200, 30, members)
        assert _ready(port)[1]["tasks"] == 4
        prober.start()
        members.append(Member(tmp_path / "host-1", kafka_bootstrap, tag))
        wait_for("the two members split the tasks", lambda: settled(members, 4), 60, members)
        wait_for("the first is ready again", lambda: _ready(port)[0] == 200, 30, members)
        time.sleep(0.2)
    finally:
        stop.set()
        prober.join(10)
        codes = [m.stop() for m in members]
    assert codes == [0, 0], [m.text()[-2000:] for m in members]
    share = len(first.assignment()[1])  # type: ignore[index]
    assert share == 2, first.text()[-2000:]
    # 200 with all four tasks, then 503 through the rebalance, then 200 with its share: never
    # 200 with the old count once the rebalance began
    changed = next(i for i, s in enumerate(seen) if s != (200, 4))
    assert seen[changed][0] == 503, seen
    after = seen[changed:]
    assert all(status == 503 or tasks == share for status, tasks in after), seen
    assert after[-1] == (200, share), seen


def test_ready_is_503_as_soon_as_a_fenced_member_runs_again(kafka_bootstrap: str,
                                                           tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    run(create_topic(kafka_bootstrap, f"gevents-{tag}", 4))
    ports = [free_port(), free_port()]
    members = [Member(tmp_path / f"host-{i}", kafka_bootstrap, tag, "-c",
                      f"job.health.port={ports[i]}") for i in range(2)]
    frozen, survivor = members
    try:
        wait_for("two members split the tasks", lambda: settled(members, 4), 60, members)
        wait_for("both are ready", lambda: all(_ready(p)[0] == 200 for p in ports), 30,
                 members)
        frozen.signal(signal.SIGSTOP)
        wait_for("the survivor runs every task", lambda: settled([survivor], 4),
                 SESSION_MS / 1000 + 20, [survivor])
        # a probe asked while it is frozen is answered as it runs again: not ready
        with socket.create_connection(("127.0.0.1", ports[0]), timeout=10) as probe:
            probe.sendall(b"GET /ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            frozen.signal(signal.SIGCONT)
            head = probe.recv(4096).split(b"\r\n", 1)[0]
        assert head == b"HTTP/1.1 503 Service Unavailable", head
        answers = []
        while "fenced out of the group" not in frozen.text():
            answers.append(_ready(ports[0]))
            assert len(answers) < 500, frozen.text()[-2000:]
            time.sleep(0.02)
        assert all(status == 503 for status, _ in answers), answers
        states = {str(body["state"]) for _, body in answers}
        assert states <= {"fenced", "rebalancing"}, answers
        wait_for("it joins again and is ready with its share", lambda: settled(members, 4)
                 and _ready(ports[0])[0] == 200, 60, members)
    finally:
        codes = [m.stop() for m in members]
    assert codes == [0, 0], [m.text()[-2000:] for m in members]
