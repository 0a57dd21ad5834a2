"""Typos in ``streams.<id>.*`` and ``stores.<name>.*`` keys are errors, as in ``task.*``."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime import LocalRunner
from samza_dsl import KV, StreamApplication, Windows
from samza_dsl.errors import ConfigError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem


def app() -> StreamApplication:
    a = StreamApplication("typos")
    local = LocalSystem("local")
    kv = KVSerde(StringSerde(), JsonSerde())
    views = a.input(local.input("page.views", serde=kv, partitions=2))
    out = a.output(local.output("counts", serde=kv, partitions=2))
    a.table("users", serde=kv)
    (views.partition_by(lambda m: m.key, lambda m: m.value, name="by-user")
     .window(Windows.keyed_tumbling(lambda m: m.key, __import__("datetime").timedelta(seconds=1)),
             name="w")
     .map(lambda pane: KV(pane.key.key, len(pane.message)))
     .send_to(out))
    return a


def plan_with(config: dict[str, object]) -> object:
    return app().plan(config=config)


def test_every_property_the_runtime_reads_is_accepted() -> None:
    a = app()
    plan = a.plan()
    window_store = next(n for n in plan.stores if n.endswith("-window-w"))
    a.plan(config={
        "streams.page.views.samza.serde.error": "skip",
        "streams.counts.retention.ms": "86400000",
        "streams.page.views.retention.bytes": -1,
        "streams.typos-1-partition_by-by-user.samza.serde.error": "dead-letter",
        "streams.users-log.samza.serde.error": "skip",  # the changelog named below
        "streams.typos-1-dead-letter.samza.serde.error": "skip",
        "stores.users.object.cache.size": 10,
        f"stores.{window_store}.write.batch.size": "100",
        "stores.users.changelog": "local.users-log",
    })


@pytest.mark.parametrize("key, expected", [
    ("streams.page.veiws.samza.serde.error",
     r"names stream 'page\.veiws'.*did you mean 'page\.views'"),
    ("streams.count.retention.ms", r"names stream 'count'.*did you mean 'counts'"),
    ("streams.counts.samza.serde.eror",
     r"unknown property 'samza\.serde\.eror' of stream 'counts'.*did you mean "
     r"'samza\.serde\.error'"),
    ("streams.counts.retention.msec", r"did you mean 'retention\.ms'"),
    ("stores.user.object.cache.size", r"names store 'user'.*did you mean 'users'"),
    ("stores.users.write.batchsize",
     r"unknown property 'write\.batchsize' of store 'users'.*did you mean 'write\.batch\.size'"),
])
def test_a_typo_is_an_error_with_a_suggestion(key: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as err:
        plan_with({key: "skip" if key.endswith("serde.error") else "1"})
    assert repr(key) in str(err.value)


def test_bad_values_of_known_properties_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"streams\.counts\.retention\.ms='soon'"):
        plan_with({"streams.counts.retention.ms": "soon"})
    with pytest.raises(ConfigError, match="keep forever"):
        plan_with({"streams.counts.retention.bytes": -5})


def test_a_runner_refuses_a_typo_before_it_touches_the_job_dir(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    with pytest.raises(ConfigError, match="did you mean 'samza.serde.error'"):
        LocalRunner(app(), {"job.dir": str(job_dir),
                            "streams.page.views.samza.serde.errors": "skip"}).run()
    assert not job_dir.exists()


@pytest.mark.parametrize("key, message", [
    ("systems.locl.log.max.bytes", r"names system 'locl'.*did you mean 'local'"),
    ("systems.local.log.max.byte", r"unknown property 'log.max.byte'.*did you mean 'log.max.bytes'"),
    ("systems.local.pth", r"unknown property 'pth'.*did you mean 'path'"),
])
def test_a_typo_in_a_system_key_is_an_error_with_a_suggestion(key: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_with({key: "5"})


def test_system_keys_the_runtime_reads_are_accepted(tmp_path: Path) -> None:
    plan_with({"systems.local.log.max.bytes": 1 << 30, "systems.local.path": str(tmp_path)})


@pytest.mark.parametrize("example", ["page_view_counts", "profile_enrichment", "trending_tags",
                                     "sliding_averages", "readwrite_counter"])
def test_every_key_the_planner_generates_is_one_it_accepts(example: str) -> None:
    """The plan's config, generated keys included, passes the checks a user's config does:
    a run's config handed on (to a container process, say) is never refused."""
    import sys

    from samza_dsl.config import check_scoped_keys, validate_config

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
    from example_apps import load_example

    app = load_example(example).app
    plan = app.plan()
    assert plan.generated_config
    assert validate_config(plan.config).keys() == plan.config.keys()
    check_scoped_keys(plan.config, streams=plan.streams, stores=plan.stores)
    assert app.plan(config=plan.config).config == plan.config


def test_a_users_own_key_reaches_the_functions_config(tmp_path: Path) -> None:
    a = StreamApplication("own-keys", config={"user.greeting": "hello"})
    local = LocalSystem("local")
    kv = KVSerde(StringSerde(), JsonSerde())
    views = a.input(local.input("views", serde=kv, partitions=1))
    out = a.output(local.output("out", serde=kv, partitions=1))

    class Greet:
        def init(self, ctx: object) -> None:
            self.config = ctx.config  # type: ignore[attr-defined]

        def __call__(self, m: KV) -> KV:
            return KV(m.key, f"{self.config['user.greeting']} {self.config['user.name']}")

    views.map(Greet(), name="greet").send_to(out)
    runner = LocalRunner(a, {"user.name": "ada", "job.dir": str(tmp_path)},
                         inputs={"views": [KV("k", 1)]})
    runner.run()
    try:
        assert runner.messages("out") == [KV("k", "hello ada")]
    finally:
        runner.close()
