"""The Samza harness itself: its one-shot entry point reads and writes JSON lines, a case Samza
fails is an error naming it (and the harness goes on serving), and a harness that is not built
fails the tests with what to run instead of skipping them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.samza_parity import samza_harness
from tests.samza_parity.judges import samza_partition
from tests.samza_parity.samza_harness import MAIN, Message, SamzaError, SamzaHarness


def test_the_entry_point_runs_a_named_pipeline_over_json_lines() -> None:
    class_path = samza_harness.check_built()
    lines = [json.dumps({"stream": "in", "partition": p, "key": k, "value": v})
             for p, k, v in [(0, "a", 1), (0, "a", 2), (1, "b", 4), (1, "b", 5)]]
    done = subprocess.run(["java", "-cp", class_path, MAIN, "run", "MapChain", "in=2", "out=2"],
                          input="\n".join(lines) + "\n", capture_output=True, text=True,
                          timeout=120, check=True)
    out = [Message(**json.loads(line)) for line in done.stdout.splitlines()]
    # filter v % 3 != 0, map v * 2, flat_map (v % 4 == 0: also key-x with v + 1), map "v..."
    expected = {("a", "v2"), ("a", "v4"), ("a-x", "v5"), ("b", "v8"), ("b-x", "v9"),
                ("b", "v10")}
    assert {(m.key, m.value) for m in out} == expected
    assert all(m.stream == "out" and m.partition == samza_partition(m.key, 2) for m in out)
    # partition by partition, each in offset order
    assert [m.partition for m in out] == sorted(m.partition for m in out)
    assert [m.value for m in out if m.key == "a"] == ["v2", "v4"]


def test_a_case_samza_fails_names_it_and_the_harness_goes_on(samza: SamzaHarness) -> None:
    with pytest.raises(SamzaError, match="NoSuchPipeline"):
        samza.run("NoSuchPipeline", {"in": 1, "out": 1}, [])
    assert samza.run("MapChain", {"in": 1, "out": 1},
                     [Message("in", 0, "a", 1)]) == [Message("out", 0, "a", "v2")]


def test_a_harness_not_built_fails_with_what_to_run(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(samza_harness, "CLASS_PATH", tmp_path / "classpath.txt")
    with pytest.raises(SamzaError, match=r"not built .* run ./dev setup"):
        SamzaHarness()
