"""Remote tables on the embedded local system (LocalRunner), through the example application
``examples/remote_profiles.py`` and a real profile service on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

from examples.remote_profiles import build_app, enrich, main, sample_input, sample_profiles
from runtime import LocalRunner
from samza_dsl import KV
from samza_dsl.testing.kv_service import KVService


def test_the_example_joins_and_writes_a_remote_table_on_the_local_system(tmp_path: Path) -> None:
    profiles = sample_profiles()
    inputs = sample_input(600)
    with KVService(profiles) as service:
        app = build_app(service.url)
        config = {"job.dir": str(tmp_path / "job")}
        runner = LocalRunner(app, config, inputs=inputs).run()
        got = sorted((kv.key, kv.value["page"], kv.value["tier"])
                     for kv in runner.messages("enriched-views"))
        expected = sorted(
            (v.key, v.value["page"], enrich(v, KV(v.key, profiles[v.key])
                                            if v.key in profiles else None).value["tier"])
            for v in inputs["page-views"])
        assert got == expected
        assert {k: v for k, v in service.data.items() if k.startswith("n")} == {
            u.key: u.value for u in inputs["profile-updates"]}
        # the cache answered most reads: at most one miss per user and task, and unknown users
        reads = [keys for _, method, keys in service.log if method == "GET"]
        assert len(reads) < len(inputs["page-views"]) // 2
        again = LocalRunner(app, config).run()  # resumes after its checkpoint: nothing new
        assert again.messages("enriched-views") == []


def test_the_example_runs_as_a_script(capsys: object) -> None:
    tiers = main(300)
    assert sum(tiers.values()) == 300 and tiers["unknown"] == 60


def test_two_container_processes_share_the_job_s_rate_limit(tmp_path: Path) -> None:
    from samza_dsl import StreamApplication
    from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
    from samza_dsl.systems import LocalSystem
    from samza_dsl.testing.kv_service import HttpKV

    rate, n = 40.0, 60
    serde = KVSerde(StringSerde(), JsonSerde())
    with KVService({f"u{i}": i for i in range(n)}) as service:
        kv = HttpKV(service.url)
        app = StreamApplication("remote-rate", config={"task.max.concurrency": 8})
        local = LocalSystem("local")
        table = app.remote_table("t", read=kv.read, rate_limit=rate)
        app.input(local.input("ids", serde=serde, partitions=2)).join_table(
            table, combine=lambda m, r: KV(m.key, r.value if r else None)).send_to(
            app.output(local.output("out", serde=serde, partitions=2)))
        inputs = {"ids": {p: [KV(f"u{i}", None) for i in range(p, n, 2)] for p in (0, 1)}}
        LocalRunner(app, {"job.dir": str(tmp_path / "job"), "job.container.count": 2},
                    inputs=inputs).run()
        times = sorted(t for t, method, _ in service.log if method == "GET")
    assert len(times) == n
    burst_per_container = max(1.0, rate / 2 / 20)
    # each container gets half the rate: together, the job's rate, not twice it
    assert times[-1] - times[0] >= (n - 2 * burst_per_container) / rate - 0.1, \
        times[-1] - times[0]
