"""The floors the benchmarks print beside their baselines (the least work each workload's
semantics ask, with no runtime) compute what the jobs and the baselines compute."""

from __future__ import annotations

from benchmarks.local_workloads import w1_floor
from benchmarks.workloads import w3_baseline, w3_floor, w3_input, w4_baseline, w4_floor, w4_input
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde


def test_w3_floor_counts_the_panes_the_baseline_counts() -> None:
    parts = w3_input(5_000)
    expected = w3_baseline(parts)
    got = w3_floor(parts, chunk=97)
    assert {(start, country): n for (start, country), n in got.items()} == \
        {(start, country): n for (country, start), n in expected.items()}


def test_w4_floor_joins_what_the_baseline_joins() -> None:
    impressions, clicks = w4_input(2_000)
    assert w4_floor(impressions, clicks) == w4_baseline(impressions, clicks) == 2_000
    # past the TTL nothing joins
    assert w4_floor(impressions, clicks, ttl_ms=-1) == 0


def test_w1_floor_counts_each_id_with_either_key_serde() -> None:
    ids = [1, 2, 1, 3, 1, 2]
    for serde in (KVSerde(StringSerde(), JsonSerde()), KVSerde(JsonSerde(), JsonSerde())):
        parts = {0: [(serde.key_serde.serialize(str(i)), b'{"id": %d}' % i) for i in ids[:3]],
                 1: [(serde.key_serde.serialize(str(i)), b'{"id": %d}' % i) for i in ids[3:]]}
        out = w1_floor(parts, serde)
        got = [(serde.key_serde.deserialize(k), JsonSerde().deserialize(v)) for k, v, _ in out]
        assert got == [("1", 1), ("2", 1), ("1", 2), ("3", 1), ("1", 3), ("2", 2)]
