"""Every stream a job writes has one owner: a changelog never shares its stream with another
store, an input, an output, an intermediate stream or the job's own streams; and the boolean
words of ``stores.<store>.changelog`` mean what they say."""

from __future__ import annotations

import pytest

from samza_dsl import StreamApplication
from samza_dsl.errors import ConfigError
from samza_dsl.serdes import JsonSerde, KVSerde, StringSerde
from samza_dsl.systems import LocalSystem

LOCAL = LocalSystem("local")
KV_JSON = KVSerde(StringSerde(), JsonSerde())


def counter(config: dict[str, object]) -> StreamApplication:
    app = StreamApplication("owned", config=config)
    events = app.input(LOCAL.input("events", serde=KV_JSON, partitions=2))
    out = app.output(LOCAL.output("out", serde=KV_JSON, partitions=2))
    app.table("a", serde=KV_JSON)
    app.table("b", serde=KV_JSON)
    events.partition_by(lambda m: m.key, serde=KV_JSON, name="by-key").send_to(out)
    return app


def test_two_stores_on_one_changelog_are_refused_naming_both() -> None:
    app = counter({"stores.a.changelog": "shared", "stores.b.changelog": "local.shared"})
    with pytest.raises(ConfigError) as err:
        app.plan()
    text = str(err.value)
    assert "'local.shared'" in text and "store 'a'" in text and "store 'b'" in text


@pytest.mark.parametrize("stream, role", [
    ("events", "the input stream 'events'"),
    ("out", "the output stream 'out'"),
    ("owned-1-partition_by-by-key", "the intermediate stream 'owned-1-partition_by-by-key'"),
    ("owned-1-dead-letter", "the job's own stream 'owned-1-dead-letter'"),
    ("__samza_checkpoint_owned-1", "the job's own stream"),
])
def test_a_changelog_on_a_stream_of_another_role_is_refused(stream: str, role: str) -> None:
    with pytest.raises(ConfigError) as err:
        counter({"stores.a.changelog": stream}).plan()
    text = str(err.value)
    assert role in text and "the changelog of store 'a'" in text
    assert "stores.<store>.changelog" in text  # what to do about it


def test_an_output_on_the_stream_of_an_input_is_refused() -> None:
    app = StreamApplication("loop")
    events = app.input(LOCAL.input("events", serde=KV_JSON))
    events.send_to(app.output(LOCAL.output("again", serde=KV_JSON, physical_name="events")))
    with pytest.raises(ConfigError, match="the input stream 'events' and the output stream "
                                          "'again'"):
        app.plan()


def test_one_descriptor_as_input_and_output_is_one_stream() -> None:
    app = StreamApplication("loop")
    events = app.input(LOCAL.input("events", serde=KV_JSON))
    events.filter(lambda m: False).send_to(app.output(LOCAL.output("events", serde=KV_JSON)))
    app.plan()


@pytest.mark.parametrize("word", ["false", "False", "no", "off", "0", False, ""])
def test_false_words_mean_no_changelog(word: object) -> None:
    plan = counter({"stores.a.changelog": word}).plan()
    assert plan.stores["a"].changelog is None
    assert plan.stores["b"].changelog == "local.owned-1-b-changelog"


@pytest.mark.parametrize("word", ["true", "yes", "on", True])
def test_true_words_mean_the_default_changelog(word: object) -> None:
    app = StreamApplication("owned", config={"stores.t.changelog": word})
    app.input(LOCAL.input("events", serde=KV_JSON)).send_to(app.table(
        "t", serde=KV_JSON, changelog=False))
    assert app.plan().stores["t"].changelog == "local.owned-1-t-changelog"


def test_a_changelog_named_without_its_system_is_on_the_changelog_system() -> None:
    plan = counter({"stores.a.changelog": "my.log"}).plan()
    assert plan.stores["a"].changelog == "local.my.log"
    assert (plan.stores["a"].changelog_system, plan.stores["a"].changelog_stream) == \
        ("local", "my.log")


def test_a_changelog_on_the_metrics_stream_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        counter({"stores.a.changelog": "owned-1-metrics", "metrics.reporters": "snapshot"}).plan()
    assert "the job's own stream 'owned-1-metrics'" in str(err.value)
    assert "the changelog of store 'a'" in str(err.value)


def test_a_changelog_on_a_window_s_late_stream_is_refused() -> None:
    from datetime import timedelta

    from samza_dsl.windows import Windows

    app = StreamApplication("owned", config={"stores.a.changelog": "slow"})
    app.table("a", serde=KV_JSON)
    events = app.input(LOCAL.input("events", serde=KV_JSON, partitions=2))
    events.window(Windows.keyed_tumbling(lambda m: m.key, timedelta(seconds=10),
                                         event_time=lambda m: m.value["t"]),
                  name="w", late_to=app.output(LOCAL.output("slow", partitions=2))).send_to(
        app.output(LOCAL.output("out", serde=KV_JSON, partitions=2)))
    with pytest.raises(ConfigError) as err:
        app.plan()
    text = str(err.value)
    assert "the output stream 'slow'" in text and "the changelog of store 'a'" in text, text
