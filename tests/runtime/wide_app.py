"""A job whose input has 64 partitions, for the job page's test of many partitions: taps that
are not bots are tagged (a step of about 0.5 ms, so a load shows as a backlog) and sent on.

``taps`` (64 partitions): ``KV(user, {"n", "bot"})``."""

from __future__ import annotations

import time
from typing import Any

from samza_dsl import KV, StreamApplication
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem


def _serde() -> KVSerde:
    return KVSerde(StringSerde(), JsonSerde())


def human(tap: KV[str, dict[str, Any]]) -> bool:
    return not tap.value.get("bot", False)


def tagged(tap: KV[str, dict[str, Any]]) -> KV[str, dict[str, Any]]:
    deadline = time.perf_counter() + 0.0005  # a step that takes a while: the input backs up
    while time.perf_counter() < deadline:
        pass
    return KV(tap.key, {**tap.value, "seen": True})


def sample_input(n: int) -> list[KV[str, dict[str, Any]]]:
    """``n`` taps of ``n // 10`` users, every seventh a bot's."""
    return [KV(f"user-{i % max(1, n // 10)}", {"n": i, "bot": i % 7 == 0}) for i in range(n)]


system = LocalSystem("local")
app = StreamApplication("taps", config={"job.default.system": "local"})
taps = app.input(system.input("taps", serde=_serde(), partitions=64))
out = app.output(system.output("human-taps", serde=_serde(), partitions=8))
taps.filter(human, name="humans").map(tagged, name="tagged").send_to(out)
