"""Whole tasks for the members of a job's Kafka consumer group (``job.coordinator=kafka``).

The containers of a job join one consumer group, ``<job.name>-<job.id>``; the broker's group
coordinator picks a leader, and the leader's ``TaskAssignor`` deals out the job's tasks:

- **Whole tasks.** A member gets every partition its active tasks read (inputs, intermediate
  streams, side inputs, broadcast streams) together; virtual tasks (``job.elasticity.factor``)
  are tasks too, so two members may read one partition, each for its own key buckets.
- **Balanced.** Active tasks differ by at most one between members, and so do the stateful
  tasks among them (so that standbys can be balanced too).
- **Host affinity.** A task goes first to a member whose local stores are at its checkpoint (its
  ``lag`` is 0): members send their store positions per task, as Samza's host affinity and Kafka
  Streams' task offset sums do.
- **Sticky.** Then to the member that ran it, then to one that kept a standby of it: adding or
  removing a member moves only as many tasks as balance asks.
- **Standbys.** With ``standby_replicas`` R, each stateful task gets min(R, members - 1)
  standbys, each on a member other than its active one and other than its other standbys,
  balanced between members, preferring members whose stores are closest, then spread: the
  standbys of one member's tasks lie on the least loaded others, each on a different one, so that
  when that member is lost its tasks go where their standbys are.
- **One plan.** Each member sends a fingerprint of its plan. The group's plan is the one most
  members run (on a tie, the leader's); a member whose fingerprint differs gets no partition and
  an error in its assignment, which ``TaskAssignor.tasks`` raises on that member. Where the
  leader itself is the odd one, nobody gets tasks until it has gone (it cannot deal out tasks it
  does not know).

``assign`` is the pure part (no I/O: same input, same output, whatever the members' order);
``TaskAssignor`` is aiokafka's adapter. The userdata both ways is msgpack (msgspec), versioned,
with tasks as their indices: subscription (fingerprint, host, container, previous generation,
previous active and standby tasks, store positions) and assignment (generation, active and standby
tasks, every task's owner, or an error). docs/several-machines.md describes the rules.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from runtime.engine.job import JobModel
from runtime.kafka.aiokafka_compat import (
    AbstractPartitionAssignor,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
    group_generation,
)
from samza_dsl.errors import SamzaError

__all__ = ["Assignment", "AssignmentRefused", "Member", "MemberTasks", "Owned", "TaskAssignor",
           "TaskSlot", "assign", "consumer_generation", "plan_fingerprint", "stateful_tasks"]


class AssignmentRefused(SamzaError):
    """This member got no tasks: its plan differs from the group's, or the group's assignment
    is not one it can read."""


# --- the pure part ----------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskSlot:
    """A task as the assignor sees it: its name, and whether it has stores with changelogs (only
    those get standbys)."""

    name: str
    stateful: bool = False


@dataclass(frozen=True)
class Member:
    """What a member tells about itself: its host, and its local stores' position per task (the
    sum of its stores' changelog offsets)."""

    host: str = ""
    positions: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Owned:
    """What a member ran in the generation it last had an assignment of."""

    active: frozenset[str] = frozenset()
    standby: frozenset[str] = frozenset()
    generation: int = -1


@dataclass(frozen=True)
class Assignment:
    """task -> its active member; task -> its standby members."""

    active: dict[str, str]
    standby: dict[str, tuple[str, ...]]

    def active_of(self, member: str) -> list[str]:
        return [t for t, m in self.active.items() if m == member]

    def standby_of(self, member: str) -> list[str]:
        return [t for t, ms in self.standby.items() if member in ms]


def assign(tasks: Sequence[TaskSlot], members: Mapping[str, Member],
           previous: Mapping[str, Owned], *, standby_replicas: int = 0,
           checkpoints: Mapping[str, int] | None = None) -> Assignment:
    """Each task to one member, and each stateful task's standbys (module docstring).

    ``previous``: member -> what it ran (stickiness); ``checkpoints``: task -> the position its
    stores' checkpoint names (by default the furthest position any member reports)."""
    if not members:
        raise SamzaError(f"no member to run the job's {len(tasks)} tasks: start a container")
    ids = sorted(members)
    lags = _lags(tasks, members, ids, checkpoints)
    was_active = _previous_owners(previous, ids)
    had_standby = {m: previous[m].standby | previous[m].active for m in ids if m in previous}

    none: frozenset[str] = frozenset()
    keys = {(t.name, m): (lag > 0, was_active.get(t.name) != m,
                          t.name not in had_standby.get(m, none), lag, m)
            for t in tasks for m, lag in lags[t.name].items()}

    def key(t: str, m: str) -> tuple[bool, bool, bool, int, str]:
        return keys[(t, m)]

    load = dict.fromkeys(ids, 0)
    active: dict[str, str] = {}
    # stateful tasks first, balanced on their own, so that their standbys can be balanced
    _deal([t.name for t in tasks if t.stateful], ids, load, key, active)
    _deal([t.name for t in tasks if not t.stateful], ids, load, key, active)
    replicas = min(max(standby_replicas, 0), len(ids) - 1)
    stateful = [t.name for t in tasks if t.stateful]
    standby = _standbys(stateful, ids, active, replicas, key) if replicas else {}
    return Assignment({t.name: active[t.name] for t in tasks}, standby)


def _lags(tasks: Sequence[TaskSlot], members: Mapping[str, Member], ids: list[str],
          checkpoints: Mapping[str, int] | None) -> dict[str, dict[str, int]]:
    """task -> member -> how far the member's stores are behind the task's checkpoint (0 for a
    task without stores: any member can run it at once)."""
    out: dict[str, dict[str, int]] = {}
    for t in tasks:
        if not t.stateful:
            out[t.name] = dict.fromkeys(ids, 0)
            continue
        at = [members[m].positions.get(t.name, 0) for m in ids]
        target = checkpoints.get(t.name, max(at)) if checkpoints is not None else max(at)
        out[t.name] = {m: max(0, target - p) for m, p in zip(ids, at, strict=True)}
    return out


def _previous_owners(previous: Mapping[str, Owned], ids: list[str]) -> dict[str, str]:
    """task -> the member that ran it, among the members still here; where two claim one task
    (one of them had not heard of a later generation), the later generation's."""
    claims: dict[str, tuple[int, str]] = {}
    for m in ids:
        owned = previous.get(m)
        if owned is None:
            continue
        for t in owned.active:
            best = claims.get(t)
            if best is None or (-owned.generation, m) < (-best[0], best[1]):
                claims[t] = (owned.generation, m)
    return {t: m for t, (_, m) in claims.items()}


def _deal(names: list[str], ids: list[str], load: dict[str, int],
          key: Callable[[str, str], tuple[Any, ...]], out: dict[str, str]) -> None:
    """Give ``names`` to members so that ``load`` ends balanced (most minus least at most 1),
    each task to the member it prefers most where that member still has room: the preferred pairs
    of all tasks are taken in order of preference, so a member keeps as many of its preferred
    tasks as its share allows."""
    if not names:
        return
    top: dict[str, int] = dict.fromkeys(ids, 0)
    for t in names:
        top[min((key(t, m), m) for m in ids)[1]] += 1
    room = _shares(len(names), ids, load, top)
    order = {t: i for i, t in enumerate(names)}
    pairs = sorted((key(t, m), order[t], t, m) for t in names for m in ids)
    for _, _, t, m in pairs:
        if t not in out and room[m] > 0:
            out[t] = m
            room[m] -= 1
            load[m] += 1


def _shares(n: int, ids: list[str], load: Mapping[str, int], top: Mapping[str, int]
            ) -> dict[str, int]:
    """How many of ``n`` new tasks each member takes so that its load ends at ``lo`` or
    ``lo + 1``; the ``lo + 1`` go to the members that must have them (already there), then to
    those that prefer the most tasks (the fewest moves)."""
    lo, extra = divmod(sum(load.values()) + n, len(ids))
    forced = [m for m in ids if load[m] > lo]
    free = sorted((m for m in ids if load[m] <= lo),
                  key=lambda m: (-(top[m] - (lo - load[m])), m))
    high = set(forced) | set(free[:max(extra - len(forced), 0)])
    return {m: (lo + (m in high)) - load[m] for m in ids}


def _standbys(stateful: list[str], ids: list[str], active: Mapping[str, str], replicas: int,
              key: Callable[[str, str], tuple[Any, ...]]) -> dict[str, tuple[str, ...]]:
    """Each stateful task's ``replicas`` standbys: distinct members other than its active one,
    balanced (most minus least at most 1). Pairs are taken in order of preference up to each
    member's share (``lo + 1``); then what is left is placed, and members below ``lo`` are
    filled, along chains of moves (a standby moves from one member to another that may hold
    it), as augmenting paths do in a matching."""
    if not stateful:
        return {}
    lo = replicas * len(stateful) // len(ids)
    held = _Standbys(active, ids)
    order = {t: i for i, t in enumerate(stateful)}
    spread = _spread(stateful, ids, active)
    pairs = sorted((key(t, m)[:-1], spread(t, m), order[t], t, m)
                   for t in stateful for m in ids if m != active[t])
    for *_, t, m in pairs:
        if len(held.of[t]) < replicas and held.load[m] <= lo:
            held.put(t, m)
    for t in stateful:
        while len(held.of[t]) < replicas:
            held.place(t, lo + 1)
    for m in ids:
        while held.load[m] < lo and held.fill(m, lo):
            pass
    return {t: tuple(sorted(held.of[t])) for t in stateful}


def _spread(stateful: list[str], ids: list[str], active: Mapping[str, str]
            ) -> Callable[[str, str], tuple[int, int]]:
    """Where members are otherwise equal for a standby: the j-th stateful task of a member
    prefers the j-th member after it, so that the standbys of one member's tasks lie on as many
    others as there are, and when it is lost its tasks go to several members that each hold a
    standby (not all to one, which balance then forces to rebuild some)."""
    rank: dict[str, int] = {}
    seen: Counter[str] = Counter()
    for t in stateful:
        rank[t] = seen[active[t]]
        seen[active[t]] += 1
    place = {m: i for i, m in enumerate(ids)}
    n = len(ids)
    load = Counter(active.values())

    def distance(t: str, m: str) -> tuple[int, int]:
        a = place[active[t]]
        return load[m], (place[m] - a - 1 - rank[t]) % n
    return distance


class _Standbys:
    """Standbys being placed: task -> members, member -> how many."""

    def __init__(self, active: Mapping[str, str], ids: list[str]) -> None:
        self.active = active
        self.ids = ids
        self.of: dict[str, set[str]] = {t: set() for t in active}
        self.on: dict[str, list[str]] = {m: [] for m in ids}
        self.load = dict.fromkeys(ids, 0)

    def may_hold(self, t: str, m: str) -> bool:
        return m != self.active[t] and m not in self.of[t]

    def put(self, t: str, m: str) -> None:
        self.of[t].add(m)
        self.on[m].append(t)
        self.load[m] += 1

    def move(self, t: str, a: str, b: str) -> None:
        self.of[t].discard(a)
        self.on[a].remove(t)
        self.load[a] -= 1
        self.put(t, b)

    def place(self, t: str, cap: int) -> None:
        """One more standby of ``t``: on a member with room below ``cap``, making room by a
        chain of moves where needed; else on the least loaded member that may hold it."""
        first = [m for m in self.ids if self.may_hold(t, m)]
        path = self._path(first, lambda m: self.load[m] < cap)
        if path is None:
            self.put(t, min(first, key=lambda m: (self.load[m], m)))
            return
        start, moves = path
        for t2, a, b in reversed(moves):
            self.move(t2, a, b)
        self.put(t, start)

    def fill(self, u: str, lo: int) -> bool:
        """One more standby for member ``u`` (below ``lo``), taken from a member above ``lo``
        along a chain of moves; False where there is none."""
        seen = {u}
        back: dict[str, tuple[str, str]] = {}
        todo = deque([u])
        while todo:
            b = todo.popleft()
            for a in self.ids:
                if a in seen:
                    continue
                t = next((t for t in self.on[a] if self.may_hold(t, b)), None)
                if t is None:
                    continue
                seen.add(a)
                back[a] = (t, b)
                if self.load[a] > lo:
                    while a != u:
                        t, b = back[a]
                        self.move(t, a, b)
                        a = b
                    return True
                todo.append(a)
        return False

    def _path(self, first: list[str], room: Callable[[str], bool]
              ) -> tuple[str, list[tuple[str, str, str]]] | None:
        """From one of ``first``, a chain of moves ending at a member with ``room``: (the
        member of ``first``, [(task, from, to), ...] in order)."""
        back: dict[str, tuple[str, str] | None] = dict.fromkeys(first)
        todo = deque(first)
        while todo:
            a = todo.popleft()
            if room(a):
                moves = []
                while (step := back[a]) is not None:
                    t, prev = step
                    moves.append((t, prev, a))
                    a = prev
                return a, moves
            for t in self.on[a]:
                for b in self.ids:
                    if b not in back and self.may_hold(t, b):
                        back[b] = (t, a)
                        todo.append(b)
        return None


# --- the plan's side --------------------------------------------------------------------------

def plan_fingerprint(job: JobModel, job_name: str) -> str:
    """A stable hash of what members must agree on: the job's name, its tasks and the partitions
    each reads, its streams with their partition counts, its stores (sha256 of a canonical
    encoding, the same in every process)."""
    plan = job.plan
    shape = [
        job_name,
        [[t.index, t.name, [[s.stream_id, s.partition] for s in t.ssps]] for t in job.tasks],
        sorted([sid, s.kind, s.physical_name, job.partitions.get(sid)]
               for sid, s in plan.streams.items()),
        sorted([name, s.kind, s.changelog or ""] for name, s in plan.stores.items()),
    ]
    return hashlib.sha256(msgspec.json.encode(shape)).hexdigest()[:16]


def stateful_tasks(job: JobModel) -> set[str]:
    """The tasks that may run a store with a changelog (the ones standbys can tail): a window's
    or a join's where the task runs its operator; a table's in every task, since any function
    may open it (``ctx.table``)."""
    logged = [s for s in job.plan.stores.values() if s.changelog is not None]
    out = set()
    for t in job.tasks:
        ops = {op for stage in t.stages for op in stage.operators}
        if any(s.kind == "table" or s.op_id in ops for s in logged):
            out.add(t.name)
    return out


# --- the wire format --------------------------------------------------------------------------

#: the userdata's version; a later version may only add fields at the end
WIRE_VERSION = 1


class SubscriptionData(msgspec.Struct, array_like=True, frozen=True):
    version: int
    fingerprint: str
    host: str
    container: str
    #: tells this member from another on the same host and container id
    instance: str
    #: the generation of ``active`` and ``standby`` (-1: none yet)
    generation: int
    active: list[int]
    standby: list[int]
    #: task index -> the position of the member's local stores
    positions: dict[int, int]


class AssignmentData(msgspec.Struct, array_like=True, frozen=True):
    version: int
    generation: int
    active: list[int]
    standby: list[int]
    #: task index -> its active member's place in ``members`` (-1: none)
    owners: dict[int, int]
    #: [member id, host, container] of each member
    members: list[list[str]]
    #: why this member got nothing (its plan differs), else empty
    error: str = ""


def _decode(kind: type[Any], data: bytes, what: str) -> Any:
    try:
        out = msgspec.msgpack.decode(data, type=kind)
    except msgspec.DecodeError as exc:
        raise SamzaError(f"{what} is not samza-dsl task assignor data ({exc}): every member of "
                         f"the group must run samza-dsl with job.coordinator=kafka") from None
    if out.version > WIRE_VERSION:
        raise SamzaError(f"{what} is task assignor data of version {out.version}; this "
                         f"samza-dsl reads version {WIRE_VERSION}: run the same samza-dsl "
                         f"version on every member")
    return out


@dataclass(frozen=True)
class MemberTasks:
    """A member's share of a generation: its tasks, and every task's owner (for status)."""

    generation: int
    active: list[str]
    standby: list[str]
    #: task -> "member id (host/container)"
    owners: dict[str, str]


def consumer_generation(consumer: Any) -> int:
    """The consumer's group generation (-1 before it joined)."""
    return group_generation(consumer)


class TaskAssignor(AbstractPartitionAssignor):
    """aiokafka's partition assignor over a job's tasks: pass an instance per consumer in
    ``partition_assignment_strategy``, subscribe to ``topics()``, then ``attach(consumer)``.
    After each rebalance, ``tasks()`` is this member's share (or raises ``AssignmentRefused``).

    ``positions()`` gives this member's store positions per task at each join; ``checkpoints()``
    (at the leader) each task's checkpointed position."""

    name = "samza-dsl-tasks"
    version = 1

    def __init__(self, job: JobModel, job_name: str, *, host: str = "", container: str = "",
                 standby_replicas: int = 0,
                 positions: Callable[[], Mapping[str, int]] | None = None,
                 checkpoints: Callable[[], Mapping[str, int]] | None = None,
                 saved: str | None = None) -> None:
        self.job = job
        self.job_name = job_name
        self.host = host
        self.container = container
        self.standby_replicas = standby_replicas
        self.positions = positions
        self.checkpoints = checkpoints
        self.fingerprint = plan_fingerprint(job, job_name)
        self.instance = uuid.uuid4().hex[:12]
        stateful = stateful_tasks(job)
        self.slots = [TaskSlot(t.name, t.name in stateful) for t in job.tasks]
        self.index = {t.name: t.index for t in job.tasks}
        self.models = {t.name: t for t in job.tasks}
        self.names = {t.index: t.name for t in job.tasks}
        self.physical = {sid: s.physical_name for sid, s in job.plan.streams.items()}
        self.generation: Callable[[], int] = lambda: -1
        self.owned = Owned()
        self.current: MemberTasks | None = None
        self.refusal: str | None = None
        #: where a static member keeps the subscription it last sent (in its job.dir)
        self.saved = saved
        self._replay = self._load_saved()

    def attach(self, consumer: Any) -> None:
        """Read the group generation from ``consumer`` (the one this assignor is given to)."""
        self.generation = lambda: consumer_generation(consumer)

    def topics(self) -> list[str]:
        """The topics to subscribe to: every stream a task reads."""
        return sorted({self.physical[s.stream_id] for t in self.job.tasks for s in t.ssps})

    def tasks(self) -> MemberTasks | None:
        """This member's share of the last assignment (None before the first)."""
        if self.refusal is not None:
            raise AssignmentRefused(self.refusal)
        return self.current

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        replay, self._replay = self._replay, None
        if replay is not None:  # a static member back: its last subscription, as it was
            return ConsumerProtocolMemberMetadata(self.version, sorted(topics), replay)
        positions = self.positions() if self.positions is not None else {}
        data = SubscriptionData(
            WIRE_VERSION, self.fingerprint, self.host, self.container, self.instance,
            self.owned.generation, sorted(self.index[t] for t in self.owned.active),
            sorted(self.index[t] for t in self.owned.standby),
            {self.index[t]: int(p) for t, p in positions.items() if t in self.index})
        encoded = msgspec.msgpack.encode(data)
        self._save(encoded)
        return ConsumerProtocolMemberMetadata(self.version, sorted(topics), encoded)

    def _load_saved(self) -> bytes | None:
        """The subscription this static member sent last, when it is of this plan, host and
        container: sent again as it was at the member's first join, the broker sees the member
        it knows come back and hands it its tasks without a rebalance (a changed subscription
        would start one: Kafka's rule for a static member that rejoins)."""
        if self.saved is None:
            return None
        try:
            with open(self.saved, "rb") as f:
                raw = f.read()
            data = msgspec.msgpack.decode(raw, type=SubscriptionData)
        except (OSError, msgspec.DecodeError):
            return None
        if (data.version, data.fingerprint, data.host, data.container) != (
                WIRE_VERSION, self.fingerprint, self.host, self.container):
            return None
        self.instance = data.instance  # the same member, back
        return raw

    def _save(self, encoded: bytes) -> None:
        if self.saved is None:
            return
        part = f"{self.saved}.part"
        try:
            with open(part, "wb") as f:
                f.write(encoded)
            os.replace(part, self.saved)
        except OSError:  # only a restart's shortcut: a rebalance does without it
            return

    def assign(self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
               ) -> dict[str, ConsumerProtocolMemberAssignment]:
        subs: dict[str, SubscriptionData] = {}
        refused: dict[str, str] = {}
        for mid, meta in members.items():
            try:
                subs[mid] = _decode(SubscriptionData, meta.user_data,
                                    f"the subscription of member {mid}")
            except SamzaError as exc:  # that member is told; the others run on
                refused[mid] = f"job {self.job_name!r}: {exc}; it gets no tasks"
        odd = self._refusals(subs)
        refused.update(odd)
        agreed = {mid: s for mid, s in subs.items() if mid not in refused}
        if any(subs[mid].instance == self.instance for mid in odd):
            # the leader's plan is not the group's: it cannot deal out tasks it does not know,
            # so nobody runs any until it has gone and a member of the majority leads
            agreed = {}
        result = assign(
            self.slots, {mid: self._member(s) for mid, s in agreed.items()},
            {mid: self._owned(s) for mid, s in agreed.items()},
            standby_replicas=self.standby_replicas,
            checkpoints=self.checkpoints() if self.checkpoints is not None else None
        ) if agreed else Assignment({}, {})
        generation = self.generation()
        ids = sorted(members)
        place = {mid: i for i, mid in enumerate(ids)}
        roster = [[mid, subs[mid].host, subs[mid].container] if mid in subs else [mid, "?", "?"]
                  for mid in ids]
        owners = {self.index[t]: place[m] for t, m in result.active.items()}
        out: dict[str, ConsumerProtocolMemberAssignment] = {}
        for mid in ids:
            mine = result.active_of(mid) if mid in agreed else []
            data = AssignmentData(
                WIRE_VERSION, generation, sorted(self.index[t] for t in mine),
                sorted(self.index[t] for t in result.standby_of(mid)) if mid in agreed else [],
                owners, roster, refused.get(mid, ""))
            out[mid] = ConsumerProtocolMemberAssignment(
                self.version, self._partitions(mine), msgspec.msgpack.encode(data))
        return out

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        try:
            data: AssignmentData = _decode(AssignmentData, assignment.user_data,
                                           "the assignment from the group leader")
        except SamzaError as exc:  # raised by tasks(), not inside aiokafka's rebalance
            self.refusal, self.current = str(exc), None
            return
        if data.error:
            self.refusal, self.current = data.error, None
            return
        # named as the member names itself (``samza-dsl status``, its page): container@host
        label = [f"{container}@{host}" for _, host, container in data.members]
        active = [self.names[i] for i in data.active]
        standby = [self.names[i] for i in data.standby]
        self.refusal = None
        self.current = MemberTasks(data.generation, active, standby,
                                   {self.names[i]: label[m] for i, m in data.owners.items()})
        self.owned = Owned(frozenset(active), frozenset(standby), data.generation)

    def _refusals(self, subs: Mapping[str, SubscriptionData]) -> dict[str, str]:
        """member -> why it gets nothing: its plan is not the group's. The group's plan is the
        one most members run; where two tie, the leader's (this member's)."""
        counts = Counter(s.fingerprint for s in subs.values())
        top = max(counts.values())
        plan = self.fingerprint if counts[self.fingerprint] == top else \
            min(fp for fp, n in counts.items() if n == top)
        me = next(mid for mid, s in subs.items() if s.instance == self.instance)
        if plan == self.fingerprint:
            peer, role = f"{me} ({self.host}/{self.container})", "the group leader"
        else:
            other = min(mid for mid, s in subs.items() if s.fingerprint == plan)
            peer = f"{other} ({subs[other].host}/{subs[other].container})"
            role = f"{counts[plan]} of the group's {len(subs)} members, such as"
        return {mid: (f"job {self.job_name!r}: member {mid} ({s.host}/{s.container}) runs a "
                      f"different plan from {role} {peer}: plan fingerprint {s.fingerprint} "
                      f"there, {plan} at {peer.partition(' ')[0]}; it gets no tasks: run the "
                      f"same application and config on every member (stop the job's old "
                      f"containers before starting a changed one)")
                for mid, s in sorted(subs.items()) if s.fingerprint != plan}

    def _member(self, s: SubscriptionData) -> Member:
        return Member(s.host, {self.names[i]: p for i, p in s.positions.items()
                               if i in self.names})

    def _owned(self, s: SubscriptionData) -> Owned:
        return Owned(frozenset(self.names[i] for i in s.active if i in self.names),
                     frozenset(self.names[i] for i in s.standby if i in self.names),
                     s.generation)

    def _partitions(self, tasks: Iterable[str]) -> list[tuple[str, list[int]]]:
        """The topic partitions of ``tasks``, together: [(topic, [partition, ...]), ...]."""
        by_topic: dict[str, set[int]] = {}
        for name in tasks:
            for ssp in self.models[name].ssps:
                by_topic.setdefault(self.physical[ssp.stream_id], set()).add(ssp.partition)
        return [(topic, sorted(ps)) for topic, ps in sorted(by_topic.items())]
