"""The task assignor (``runtime.kafka.assignor``) without a broker: properties of the pure
``assign`` under hypothesis, and the aiokafka adapter turning a real plan's tasks into topic
partitions and back through its msgpack userdata."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka_apps import assignor_app as plan_app
from kafka_apps import assignor_job as job_of

from runtime.kafka.assignor import (
    Assignment,
    AssignmentData,
    AssignmentRefused,
    Member,
    Owned,
    SubscriptionData,
    TaskAssignor,
    TaskSlot,
    assign,
    plan_fingerprint,
    stateful_tasks,
)

MEMBER_IDS = st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=3), min_size=1,
                      max_size=7, unique=True)


@st.composite
def task_slots(draw: Any, stateful: bool | None = None, max_size: int = 30) -> list[TaskSlot]:
    n = draw(st.integers(1, max_size))
    flags = [stateful if stateful is not None else draw(st.booleans()) for _ in range(n)]
    return [TaskSlot(f"Partition {i}", f) for i, f in enumerate(flags)]


@st.composite
def situations(draw: Any) -> tuple[list[TaskSlot], dict[str, Member], dict[str, Owned], int]:
    """Any tasks, members with any store positions, any (even conflicting) previous owners."""
    tasks = draw(task_slots())
    ids = draw(MEMBER_IDS)
    names = [t.name for t in tasks]
    members = {m: Member(f"host-{m}", draw(st.dictionaries(st.sampled_from(names),
                                                           st.integers(0, 50), max_size=6)))
               for m in ids}
    previous = {m: Owned(frozenset(draw(st.sets(st.sampled_from(names), max_size=6))),
                         frozenset(draw(st.sets(st.sampled_from(names), max_size=4))),
                         draw(st.integers(-1, 5)))
                for m in ids if draw(st.booleans())}
    return tasks, members, previous, draw(st.integers(0, 3))


def counts(a: Assignment, ids: list[str]) -> tuple[Counter[str], Counter[str]]:
    active = Counter({m: 0 for m in ids})
    active.update(a.active.values())
    standby = Counter({m: 0 for m in ids})
    standby.update(m for ms in a.standby.values() for m in ms)
    return active, standby


def spread(c: Counter[str]) -> int:
    return max(c.values()) - min(c.values())


@settings(max_examples=120, deadline=None)
@given(situations())
def test_every_task_has_exactly_one_active_owner_and_loads_are_balanced(s: Any) -> None:
    tasks, members, previous, replicas = s
    a = assign(tasks, members, previous, standby_replicas=replicas)
    assert list(a.active) == [t.name for t in tasks]
    assert set(a.active.values()) <= set(members)
    active, standby = counts(a, list(members))
    assert spread(active) <= 1, active
    stateful = Counter({m: 0 for m in members})
    stateful.update(a.active[t.name] for t in tasks if t.stateful)
    assert spread(stateful) <= 1, stateful
    assert spread(standby) <= 1, (standby, a)


@settings(max_examples=120, deadline=None)
@given(situations())
def test_a_standby_never_sits_with_its_active_and_each_is_on_a_distinct_member(s: Any) -> None:
    tasks, members, previous, replicas = s
    a = assign(tasks, members, previous, standby_replicas=replicas)
    want = min(replicas, len(members) - 1)
    for t in tasks:
        ms = a.standby.get(t.name, ())
        assert len(ms) == (want if t.stateful else 0), (t, ms)
        assert len(set(ms)) == len(ms)
        assert a.active[t.name] not in ms


def least_moves(before: Counter[str], n_tasks: int, ids: list[str]) -> int:
    """The fewest tasks a balanced assignment over ``ids`` can move from ``before`` (member ->
    its tasks; members not in ``ids`` are gone): the members that had the most keep the larger
    shares."""
    lo, extra = divmod(n_tasks, len(ids))
    had = sorted((before.get(m, 0) for m in ids), reverse=True)
    kept = sum(min(h, lo + 1 if i < extra else lo) for i, h in enumerate(had))
    return n_tasks - kept


@settings(max_examples=120, deadline=None)
@given(st.booleans(), st.data())
def test_adding_or_removing_one_member_moves_only_what_balance_asks(stateful: bool,
                                                                    data: Any) -> None:
    tasks = data.draw(task_slots(stateful=stateful))
    ids = data.draw(MEMBER_IDS)
    replicas = data.draw(st.integers(0, 2))
    first = assign(tasks, {m: Member() for m in ids}, {}, standby_replicas=replicas)
    previous = {m: Owned(frozenset(first.active_of(m)), frozenset(first.standby_of(m)), 1)
                for m in ids}
    if data.draw(st.booleans()) or len(ids) == 1:
        # a new id sorts anywhere among the others (the ids are 1 to 3 letters)
        now = [*ids, data.draw(st.text(alphabet="abcdefgh", min_size=4, max_size=4))]
    else:
        gone = data.draw(st.sampled_from(ids))
        now = [m for m in ids if m != gone]
    second = assign(tasks, {m: Member() for m in now}, previous, standby_replicas=replicas)
    moved = sum(1 for t in tasks if first.active[t.name] != second.active[t.name])
    assert moved == least_moves(Counter(first.active.values()), len(tasks), now)


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_a_task_goes_to_the_member_whose_store_is_at_its_checkpoint_as_far_as_balance_allows(
        data: Any) -> None:
    tasks = data.draw(task_slots(stateful=True))
    ids = data.draw(MEMBER_IDS)
    checkpoint = 1000
    home = {t.name: data.draw(st.sampled_from(ids)) for t in tasks}
    members = {m: Member(m, {t.name: (checkpoint if home[t.name] == m else
                                      data.draw(st.integers(0, checkpoint - 1)))
                             for t in tasks if home[t.name] == m or data.draw(st.booleans())})
               for m in ids}
    given_checkpoints = data.draw(st.booleans())
    a = assign(tasks, members, {}, checkpoints={t.name: checkpoint for t in tasks}
               if given_checkpoints else None)
    at_home = sum(1 for t in tasks if a.active[t.name] == home[t.name])
    assert at_home == len(tasks) - least_moves(Counter(home.values()), len(tasks), ids)


@settings(max_examples=120, deadline=None)
@given(situations(), st.randoms(use_true_random=False))
def test_the_same_input_gives_the_same_output_whatever_the_members_order(s: Any,
                                                                          rnd: random.Random
                                                                          ) -> None:
    tasks, members, previous, replicas = s
    a = assign(tasks, members, previous, standby_replicas=replicas)
    order = list(members)
    rnd.shuffle(order)
    prev_order = list(previous)
    rnd.shuffle(prev_order)
    b = assign(tasks, {m: members[m] for m in order}, {m: previous[m] for m in prev_order},
               standby_replicas=replicas)
    assert a == b


def test_no_member_is_an_error_naming_the_tasks() -> None:
    with pytest.raises(Exception, match="no member to run the job's 2 tasks"):
        assign([TaskSlot("a"), TaskSlot("b")], {}, {})


# --- the adapter, over a real plan --------------------------------------------------------------

def test_two_members_get_whole_tasks_with_every_partition_each_task_reads() -> None:
    job = job_of(plan_app())
    assert len(job.tasks) == 8  # 4 partitions x 2 virtual tasks
    assert stateful_tasks(job) == {t.name for t in job.tasks}
    a, b = (TaskAssignor(job, "assign-t-1", host="h", container=c, standby_replicas=1)
            for c in ("0", "1"))
    out = a.assign(None, {"m-a": a.metadata(a.topics()), "m-b": b.metadata(b.topics())})
    a.on_assignment(out["m-a"])
    b.on_assignment(out["m-b"])
    ta, tb = a.tasks(), b.tasks()
    assert ta is not None and tb is not None
    assert sorted(ta.active + tb.active) == sorted(t.name for t in job.tasks)
    assert len(ta.active) == len(tb.active) == 4
    assert sorted(ta.standby) == sorted(tb.active)  # two members: each keeps the other's standby
    assert ta.owners == tb.owners and set(ta.owners) == {t.name for t in job.tasks}
    for member, mine in (("m-a", ta), ("m-b", tb)):
        got = {(topic, p) for topic, ps in out[member].assignment for p in ps}
        want = {(job.plan.streams[s.stream_id].physical_name, s.partition)
                for t in job.tasks if t.name in mine.active for s in t.ssps}
        assert got == want
        # each task's partitions together: clicks, its side input, the broadcast stream (the
        # rules topic itself goes with the tasks of its one partition)
        assert {"clicks-t", "updates-t", "assign-t-1-broadcast-all-rules"} <= {
            topic for topic, _ in got}
        assert {p for topic, p in got if topic == "clicks-t"} == {
            p for topic, p in got if topic == "updates-t"}
    # the userdata is small: msgpack arrays of task indices
    assert len(a.metadata(a.topics()).user_data) < 80
    assert len(out["m-a"].user_data) < 120


def test_a_member_sends_what_it_ran_and_its_store_positions() -> None:
    job = job_of(plan_app())
    name = job.tasks[3].name
    a = TaskAssignor(job, "assign-t-1", host="h1", container="0",
                     positions=lambda: {name: 42})
    out = a.assign(None, {"m-a": a.metadata(a.topics())})
    a.on_assignment(out["m-a"])
    sent = msgspec.msgpack.decode(a.metadata(a.topics()).user_data, type=SubscriptionData)
    assert (sent.version, sent.fingerprint, sent.host, sent.container) == (
        1, plan_fingerprint(job, "assign-t-1"), "h1", "0")
    assert sent.active == sorted(t.index for t in job.tasks)
    assert sent.positions == {job.tasks[3].index: 42}


def test_a_static_member_back_sends_its_last_subscription_as_it_was(tmp_path: Any) -> None:
    """The broker hands a static member that rejoins its tasks without a rebalance only when
    its subscription is unchanged: a new process of the member sends its last one again, byte
    for byte, at its first join; then what it runs, as before. Another plan, host or container
    sends its own."""
    job = job_of(plan_app())
    saved = str(tmp_path / "group-subscription")
    a = TaskAssignor(job, "assign-t-1", host="h1", container="0", saved=saved)
    out = a.assign(None, {"m-a": a.metadata(a.topics())})
    a.on_assignment(out["m-a"])
    last = a.metadata(a.topics()).user_data
    back = TaskAssignor(job, "assign-t-1", host="h1", container="0", saved=saved)
    assert back.metadata(back.topics()).user_data == last
    assert back.instance == a.instance
    assert back.metadata(back.topics()).user_data != last  # it ran nothing yet, says so
    for name, host, container in (("assign-t-2", "h1", "0"), ("assign-t-1", "h2", "0"),
                                  ("assign-t-1", "h1", "1")):
        (tmp_path / "group-subscription").write_bytes(last)
        other = TaskAssignor(job, name, host=host, container=container, saved=saved)
        sent = msgspec.msgpack.decode(other.metadata(other.topics()).user_data,
                                      type=SubscriptionData)
        assert (sent.generation, sent.active, sent.instance) == (-1, [], other.instance)


def test_the_fingerprint_is_stable_and_follows_the_plans_shape() -> None:
    one = plan_fingerprint(job_of(plan_app()), "j-1")
    assert one == plan_fingerprint(job_of(plan_app()), "j-1")
    assert one != plan_fingerprint(job_of(plan_app()), "j-2")
    assert one != plan_fingerprint(job_of(plan_app(factor=4)), "j-1")
    assert one != plan_fingerprint(job_of(plan_app(parts=8)), "j-1")


def test_a_member_with_another_plan_is_refused_with_one_line_naming_both() -> None:
    job, other = job_of(plan_app()), job_of(plan_app(factor=4))
    lead = TaskAssignor(job, "assign-t-1", host="h1", container="0")
    odd = TaskAssignor(other, "assign-t-1", host="h2", container="1")
    out = lead.assign(None, {"m-lead": lead.metadata(lead.topics()),
                             "m-odd": odd.metadata(odd.topics())})
    assert out["m-odd"].assignment == []
    lead.on_assignment(out["m-lead"])
    odd.on_assignment(out["m-odd"])
    mine = lead.tasks()
    assert mine is not None and len(mine.active) == len(job.tasks)
    with pytest.raises(AssignmentRefused) as info:
        odd.tasks()
    msg = str(info.value)
    assert "\n" not in msg
    for part in ("m-odd (h2/1)", "m-lead (h1/0)", odd.fingerprint, lead.fingerprint,
                 "run the same application and config on every member"):
        assert part in msg


def test_userdata_of_a_later_version_is_a_clear_error() -> None:
    job = job_of(plan_app())
    a = TaskAssignor(job, "assign-t-1")
    later = AssignmentData(2, 1, [], [], {}, [])
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
    a.on_assignment(ConsumerProtocolMemberAssignment(1, [], msgspec.msgpack.encode(later)))
    with pytest.raises(AssignmentRefused, match="version 2; this samza-dsl reads version 1"):
        a.tasks()


def test_a_member_whose_userdata_is_not_the_assignors_is_refused_and_the_others_run() -> None:
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata
    job = job_of(plan_app())
    lead = TaskAssignor(job, "assign-t-1", host="h1", container="0")
    later = msgspec.msgpack.encode([2, lead.fingerprint, "h3", "3", "x", -1, [], [], {}])
    out = lead.assign(None, {
        "m-lead": lead.metadata(lead.topics()),
        "m-other": ConsumerProtocolMemberMetadata(0, lead.topics(), b"not msgpack of ours"),
        "m-later": ConsumerProtocolMemberMetadata(1, lead.topics(), later)})
    lead.on_assignment(out["m-lead"])
    mine = lead.tasks()
    assert mine is not None and len(mine.active) == len(job.tasks)
    for mid, why in (("m-other", "is not samza-dsl task assignor data"),
                     ("m-later", "version 2; this samza-dsl reads version 1")):
        data = msgspec.msgpack.decode(out[mid].user_data, type=AssignmentData)
        assert out[mid].assignment == [] and data.active == []
        assert f"the subscription of member {mid}" in data.error and why in data.error
        assert "\n" not in data.error


def test_a_leader_whose_plan_differs_from_most_members_refuses_itself_and_deals_out_nothing(
        ) -> None:
    job, other = job_of(plan_app()), job_of(plan_app(factor=4))
    lead = TaskAssignor(other, "assign-t-1", host="h1", container="0")
    a, b = (TaskAssignor(job, "assign-t-1", host="h2", container=c) for c in ("1", "2"))
    out = lead.assign(None, {"m-lead": lead.metadata(lead.topics()),
                             "m-a": a.metadata(a.topics()), "m-b": b.metadata(b.topics())})
    assert all(out[m].assignment == [] for m in out)
    lead.on_assignment(out["m-lead"])
    with pytest.raises(AssignmentRefused) as info:
        lead.tasks()
    msg = str(info.value)
    for part in ("member m-lead (h1/0) runs a different plan from 2 of the group's 3 members, "
                 "such as m-a (h2/1)", lead.fingerprint, a.fingerprint):
        assert part in msg, (part, msg)
    a.on_assignment(out["m-a"])
    waiting = a.tasks()  # no error: it waits for the next rebalance, led by a member like it
    assert waiting is not None and waiting.active == [] and waiting.owners == {}


@pytest.mark.parametrize("members", [2, 3, 4, 5])
def test_the_tasks_of_a_lost_member_go_to_the_members_that_hold_their_standbys(
        members: int) -> None:
    """Standbys of one member's tasks are spread over the others, least loaded first, so that
    when the busiest member is lost, balance sends each of its tasks to a member whose standby
    is at its checkpoint (no rebuild from the changelog): up to two tasks a member."""
    ids = [f"m{i}" for i in range(members)]
    for n_tasks in range(members, 2 * members + 1):
        tasks = [TaskSlot(f"t{i}", stateful=True) for i in range(n_tasks)]
        first = assign(tasks, {m: Member() for m in ids}, {}, standby_replicas=1)
        gone = max(ids, key=lambda m: (len(first.active_of(m)), m))
        now = [m for m in ids if m != gone]
        previous = {m: Owned(frozenset(first.active_of(m)), frozenset(first.standby_of(m)), 1)
                    for m in now}
        at = {m: Member(m, {t: 100 for t in previous[m].active | previous[m].standby})
              for m in now}
        second = assign(tasks, at, previous, standby_replicas=1,
                        checkpoints={t.name: 100 for t in tasks})
        rebuilt = [t for t in first.active_of(gone) if second.active[t] not in first.standby[t]]
        assert not rebuilt, (n_tasks, first, second)
