"""The health endpoint of a group member (``job.coordinator=kafka``): ``/ready`` is 200 only
once the group has dealt the member its tasks and their stores are restored, and each member of
two answers for its own share (tansu on 127.0.0.1, real processes)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from group_helpers import Member, settled, wait_for
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
