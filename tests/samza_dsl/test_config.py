"""Config keys: Samza's names and defaults; unknown task./job. keys and bad values name the key."""

from __future__ import annotations

import re

import pytest

from samza_dsl import ConfigError
from samza_dsl.config import KNOWN_KEYS, config_value, validate_config

# API.md "Configuration keys": name -> Samza's default
API_DEFAULTS = {
    "task.max.concurrency": 1,
    "task.callback.timeout.ms": -1,
    "task.commit.ms": 60000,
    "task.window.ms": -1,
    "task.async.commit": False,
    "job.container.thread.pool.size": 0,
    "job.container.count": 1,
    "job.elasticity.factor": 1,
    "job.intermediate.stream.partitions": None,
    "task.checkpoint.system": None,
}


@pytest.mark.parametrize("name, default", sorted(API_DEFAULTS.items()))
def test_api_keys_are_known_with_samzas_defaults(name, default):
    assert name in KNOWN_KEYS
    assert config_value({}, name) == default
    assert config_value({name: None}, name) == default


def test_none_and_empty_config():
    assert validate_config(None) == {}
    assert validate_config({}) == {}


def test_validate_returns_a_typed_copy():
    given = {"task.max.concurrency": "16", "task.async.commit": "true",
             "job.container.count": 2.0, "task.checkpoint.system": "kafka"}
    out = validate_config(given)
    assert out == {"task.max.concurrency": 16, "task.async.commit": True,
                   "job.container.count": 2, "task.checkpoint.system": "kafka"}
    assert given["task.max.concurrency"] == "16"  # the input is not changed


@pytest.mark.parametrize("text, value", [("true", True), ("False", False), (" yes ", True),
                                         ("0", False), (True, True)])
def test_booleans(text, value):
    assert validate_config({"task.async.commit": text})["task.async.commit"] is value


@pytest.mark.parametrize("key", ["task.max.concurency", "task.foo", "job.bogus.key",
                                 "job.intermediate.partitions", "task.windows.ms"])
def test_unknown_task_and_job_keys_raise_naming_the_key(key):
    with pytest.raises(ConfigError, match=re.escape(repr(key))):
        validate_config({key: 1})


def test_unknown_key_suggests_the_closest_known_key():
    with pytest.raises(ConfigError, match=re.escape("did you mean 'task.window.ms'")):
        validate_config({"task.windw.ms": 1})


@pytest.mark.parametrize("key", ["stores.t.changelog", "systems.kafka.bootstrap.servers",
                                 "streams.in.samza.offset.default", "user.anything",
                                 "user.greeting.text"])
def test_scoped_and_user_keys_pass_through(key):
    # the planner checks the ids of streams./stores./systems. keys; user.* is the user's own
    assert validate_config({key: "v"}) == {key: "v"}


@pytest.mark.parametrize("key, meant", [
    ("strems.events.retention.ms", "streams.events.retention.ms"),
    ("metrics.reporter", "metrics.reporters"),
    ("max.concurrency", "task.max.concurrency"),
    ("metrics.reporters.interval.ms", "metrics.reporter.interval.ms"),
    ("sytems.local.path", "systems.local.path"),
    ("stors.counts.changelog", "stores.counts.changelog"),
    ("usr.greeting", "user.greeting"),
    ("app.name", "job.name"),
])
def test_a_typo_outside_task_and_job_is_an_error_with_the_key_meant(key, meant):
    with pytest.raises(ConfigError) as err:
        validate_config({key: "5"})
    text = str(err.value)
    assert text.startswith(f"unknown config key {key!r} (did you mean {meant!r}?)")
    assert "user.*" in text and "\n" not in text


@pytest.mark.parametrize("key", ["custom", "app.anything", "serializers.registry.json.class",
                                 "metrics.bogus", "user.", "ui.port"])
def test_a_key_nothing_reads_is_an_error_that_says_where_own_keys_go(key):
    with pytest.raises(ConfigError, match=re.escape(f"unknown config key {key!r}") + ".*"
                       + re.escape("put keys of your own under user.*")):
        validate_config({key: "v"})


@pytest.mark.parametrize("key, value", [
    ("task.max.concurrency", 0),
    ("task.max.concurrency", -3),
    ("task.max.concurrency", "many"),
    ("task.max.concurrency", 1.5),
    ("task.max.concurrency", True),
    ("task.max.concurrency", [1]),
    ("task.callback.timeout.ms", 0),
    ("task.callback.timeout.ms", -2),
    ("task.commit.ms", 0),
    ("task.window.ms", 0),
    ("task.window.ms", -5),
    ("task.async.commit", "maybe"),
    ("task.async.commit", 2),
    ("job.container.thread.pool.size", -1),
    ("job.container.count", 0),
    ("job.elasticity.factor", 0),
    ("job.intermediate.stream.partitions", 0),
    ("job.intermediate.stream.partitions", -1),
    ("job.intermediate.stream.partitions", "x"),
])
def test_bad_values_raise_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=re.escape(key)):
        validate_config({key: value})


@pytest.mark.parametrize("key, value", [
    ("task.callback.timeout.ms", -1),
    ("task.callback.timeout.ms", 5000),
    ("task.commit.ms", -1),
    ("task.window.ms", -1),
    ("job.container.thread.pool.size", 0),
    ("job.intermediate.stream.partitions", 1),
])
def test_boundary_values_are_accepted(key, value):
    assert validate_config({key: value}) == {key: value}


def test_serde_error_policy_is_checked():
    key = "streams.in.samza.serde.error"
    assert validate_config({key: "Skip"}) == {key: "skip"}
    with pytest.raises(ConfigError, match=re.escape(key)):
        validate_config({key: "ignore"})


def test_config_must_be_a_mapping_with_string_keys():
    with pytest.raises(ConfigError, match="mapping"):
        validate_config([("task.max.concurrency", 1)])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="non-empty strings"):
        validate_config({1: 2})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="non-empty strings"):
        validate_config({"": 2})


def test_the_kafka_unavailable_timeout_is_milliseconds_of_at_least_100():
    key = "job.kafka.unavailable.timeout.ms"
    assert config_value({}, key) == 30000
    assert validate_config({key: "3000"})[key] == 3000
    for bad in ("50", "-1", "soon"):
        with pytest.raises(ConfigError, match=re.escape(key)):
            validate_config({key: bad})


def test_processing_guarantee_defaults_to_at_least_once_and_takes_exactly_once():
    assert config_value({}, "job.processing.guarantee") == "at-least-once"
    out = validate_config({"job.processing.guarantee": "exactly-once"})
    assert out["job.processing.guarantee"] == "exactly-once"


@pytest.mark.parametrize("value", ["exactly_once", "EOS", "at-most-once", ""])
def test_an_unknown_processing_guarantee_lists_the_choices(value):
    with pytest.raises(ConfigError, match=r"job\.processing\.guarantee=.*one of at-least-once, "
                                          r"exactly-once"):
        validate_config({"job.processing.guarantee": value})


def test_exactly_once_refuses_async_commit_when_the_job_is_planned():
    from samza_dsl import StreamApplication
    from samza_dsl.systems import MemorySystem

    app = StreamApplication("eos-async", config={"task.async.commit": True})
    mem = MemorySystem()
    app.input(mem.input("in")).send_to(app.output(mem.output("out")))
    with pytest.raises(ConfigError, match="task.async.commit=true cannot go with "
                                          "job.processing.guarantee=exactly-once"):
        app.plan(config={"job.processing.guarantee": "exactly-once"})
    app.plan(config={"job.processing.guarantee": "at-least-once"})
