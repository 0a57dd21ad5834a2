"""``runtime.engine.origins``: the rule by which a task skips replayed records of an
intermediate stream (docs/semantics.md, "Replays applied once"), piece by piece."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.engine.handout import Batch, Cursor, Handout
from runtime.engine.job import SSP
from runtime.engine.origins import (
    ORIGIN_HEADER,
    REPLAYED,
    Applied,
    Stamps,
    _apply,
    _apply_each,
    decode_origins,
    origin_key,
)

Q = SSP("hop", 0)


def _batch(first: int, origins: list[Any]) -> tuple[Batch, list[Any]]:
    return Batch(Q, first, [f"m{first + i}" for i in range(len(origins))]), origins


def test_in_order_records_are_skipped_at_or_below_the_last_applied() -> None:
    applied = Applied(REPLAYED, {})
    b, o = _batch(0, [["in/0", 5, 0], ["in/0", 5, 1], ["in/1", 2, 0], ["in/0", 6, 0]])
    applied.decide(b, o)
    assert REPLAYED not in b.payloads
    # the upstream task of in/0 restarted from its checkpoint at 4: 5/0, 5/1, 6/0 again, then 7/0
    b2, o2 = _batch(4, [["in/0", 5, 0], ["in/0", 5, 1], ["in/0", 6, 0], ["in/0", 7, 0],
                        ["in/1", 2, 0], ["in/1", 3, 0], None])
    applied.decide(b2, o2)
    assert b2.payloads == [REPLAYED, REPLAYED, REPLAYED, "m7", REPLAYED, "m9", "m10"]
    assert applied.replays == 4


def test_records_with_floors_are_skipped_by_floor_or_by_pair() -> None:
    applied = Applied(REPLAYED, {})
    # out of order (an async step upstream): 7 before 6, the floor says all up to 4 completed
    b, o = _batch(0, [["in/0", 7, 0, 4], ["in/0", 6, 0, 4], ["in/0", 8, 0, 6]])
    applied.decide(b, o)
    assert REPLAYED not in b.payloads
    b2, o2 = _batch(3, [["in/0", 5, 0, 4], ["in/0", 6, 0, 4], ["in/0", 7, 0, 4],
                        ["in/0", 9, 0, 6]])
    applied.decide(b2, o2)  # 5 and 6 are under the floor 6; 7 was applied; 9 is new
    assert b2.payloads == [REPLAYED, REPLAYED, REPLAYED, "m6"]


def test_a_checkpoint_inside_a_decided_batch_records_only_what_it_covers() -> None:
    done: dict[SSP, int] = {}
    applied = Applied(REPLAYED, done)
    b, o = _batch(10, [["in/0", 1, 0], ["in/0", 2, 0], ["in/0", 3, 0]])
    applied.decide(b, o)
    done[Q] = 10  # the task handed out offset 10 only when it committed
    snap = applied.snapshot(done)
    assert snap == {"hop/0": {"in/0": [1, 0]}}
    # restored from that checkpoint, offsets 11 and 12 come again and are applied, not skipped
    again = Applied(REPLAYED, {})
    again.load(snap)
    b2, o2 = _batch(11, [["in/0", 2, 0], ["in/0", 3, 0]])
    again.decide(b2, o2)
    assert REPLAYED not in b2.payloads
    done[Q] = 12
    assert applied.snapshot(done) == {"hop/0": {"in/0": [3, 0]}}


def test_a_checkpoint_before_any_record_of_a_decided_batch_records_none_of_it() -> None:
    """A task took a batch of a partition it has completed nothing of yet (no offset in its
    checkpoint: it starts there, or a commit came before its first message of it completed):
    the checkpoint holds none of that batch as applied, so a restart from it applies the
    records, not skips them."""
    done: dict[SSP, int] = {}
    applied = Applied(REPLAYED, done)
    b, o = _batch(0, [["in/0", 1, 0], ["in/0", 2, 0]])
    applied.decide(b, o)
    snap = applied.snapshot(done)
    assert snap.get("hop/0", {}) == {}
    again = Applied(REPLAYED, {})
    again.load(snap)
    b2, o2 = _batch(0, [["in/0", 1, 0], ["in/0", 2, 0]])
    again.decide(b2, o2)
    assert REPLAYED not in b2.payloads


def test_a_snapshot_with_pairs_reads_back() -> None:
    applied = Applied(REPLAYED, {})
    b, o = _batch(0, [["in/0", 7, 0, 4], ["in/0", 9, 1, 4]])
    applied.decide(b, o)
    snap = applied.snapshot({Q: 1})
    again = Applied(REPLAYED, {})
    again.load(snap)
    b2, o2 = _batch(2, [["in/0", 9, 1, 4], ["in/0", 9, 0, 4], ["in/0", 3, 0, 4]])
    again.decide(b2, o2)
    assert b2.payloads == [REPLAYED, "m3", REPLAYED]


def test_stamps_name_the_message_and_count_its_records() -> None:
    src = Cursor()
    src.batch = Batch(SSP("in", 3), 100, ["a", "b"])
    done: dict[SSP, int] = {}
    stamps = Stamps({SSP("in", 3): origin_key(SSP("in", 3))}, lambda: None, object(), src, done,
                    ordered=True)
    assert stamps.header() is None  # not handing out: a window's firing, a timer
    stamps.live = True
    src.index = 1
    heads = [stamps.header(), stamps.header()]
    src.index = 2
    heads.append(stamps.header())
    assert all(h is not None and h[0][0] == ORIGIN_HEADER for h in heads)
    assert decode_origins([*heads, None]) == [["in/3", 100, 0], ["in/3", 100, 1],
                                              ["in/3", 101, 0], None]
    # a message that goes on asynchronously counts on from what it wrote while handed out
    rec = Handout(SSP("in", 3), 101, False, 0.0, None)
    stamps.went_async(rec)
    async_stamps = Stamps({}, lambda: rec, object(), src, done, ordered=False)
    done[SSP("in", 3)] = 99
    assert decode_origins([async_stamps.header()]) == [["in/3", 101, 1, 99]]
    assert origin_key(SSP("in", 3), 1, 4) == "in/3/1of4"


def test_a_decoded_batch_gives_its_records_origins_and_control_records_between_them() -> None:
    from runtime.engine.codec import StreamCodec, control_record
    from runtime.engine.origins import OriginList
    from runtime.engine.records import Watermark
    from samza_dsl import KV
    from samza_dsl.serdes import KVSerde, SafeSerde

    codec = StreamCodec("hop", KVSerde(SafeSerde(), SafeSerde()))
    codec.origins = True
    src = Cursor()
    src.batch = Batch(SSP("in", 0), 40, [None] * 30)
    stamps = Stamps({}, lambda: None, object(), src, {}, ordered=True)
    stamps.live = True
    records = []
    for i in range(30):
        src.index = i + 1
        k, v, _ = codec.encode(KV(f"k{i}", {"n": i}))
        records.append((k, v, stamps.header()))
        if i == 14:
            records.append(control_record(Watermark("t0", 5), 1))
    out = codec.decode_batch(SSP("hop", 0), 0, records, 1)
    assert isinstance(out, OriginList)
    assert out[15] == Watermark("t0", 5) and out.origins[15] is None
    data = [m for m in out if isinstance(m, KV)]
    assert data == [KV(f"k{i}", {"n": i}) for i in range(30)]
    assert [o[1] for o in out.origins if o is not None] == list(range(40, 70))
    codec.origins = False  # a stream that is not intermediate gives a plain list
    assert type(codec.decode_batch(SSP("hop", 0), 0, records, 1)) is list


_origin = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["in/0", "in/1", "in/2/0of2"]), st.integers(0, 40),
              st.sampled_from([0, 0, 0, 1])).map(list),
    st.tuples(st.sampled_from(["in/0", "in/3"]), st.integers(0, 40), st.integers(0, 1),
              st.integers(-1, 40)).map(list))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_origin, max_size=30), max_size=6),
       st.lists(st.tuples(st.sampled_from(["in/0", "in/1", "in/2/0of2"]), st.integers(0, 12),
                          st.integers(0, 60), st.integers(0, 60)), max_size=3))
def test_runs_decide_as_record_by_record_does(batches: list[list[Any]],
                                              runs: list[tuple[str, int, int, int]]) -> None:
    """The decision by runs (in-order origins, one record a message) marks the same replays
    and leaves the same state as the rule applied record by record; ``runs`` adds long
    in-order runs of one origin, each with a restart (its upstream task replayed from ``back``)
    inside it."""
    for key, lo, n, back in runs:
        batches.append([[key, off, 0] for off in [*range(lo, lo + n), *range(back, back + n)]])
        # the next batch starts again at the last record applied (a checkpoint just before it)
        batches.append([[key, off, 0] for off in range(back + n - 1, back + n + 9)])
    by_runs: dict[str, list[Any]] = {}
    one_by_one: dict[str, list[Any]] = {}
    for origins in batches:
        a = [f"m{i}" for i in range(len(origins))]
        b = list(a)
        assert _apply(by_runs, origins, a, REPLAYED) == _apply_each(
            one_by_one, origins, 0, len(origins), b, REPLAYED)
        assert a == b
        assert by_runs == one_by_one
