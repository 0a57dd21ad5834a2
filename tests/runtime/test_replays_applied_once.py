"""Replays applied once, at least once on the embedded local system (docs/semantics.md,
"Replays applied once").

The proof job of ``test_exactly_once.py`` (a running count per key in a table behind an
intermediate stream) runs at least once and is killed with SIGKILL at seeded points: at random
times, after a processed batch and at each step of a commit (``runtime.engine.faults.POINTS``).
Its upstream tasks, restarting from their checkpoints, write into the intermediate stream again
what they had written after them; the counting tasks skip what they had applied. So each key's
counts may repeat (outputs are at least once) but every value is the same as the first time:
the counts are 1, 2, ... n, each at least once, in order, none beyond n."""

from __future__ import annotations

import time
from pathlib import Path

from runtime.engine.faults import POINTS
from tests.runtime.test_exactly_once import _found, _lanes, _truth

KILLS = 12
LANES = 2


def _runs_up(counts: list[int]) -> bool:
    """1, 2, ... n, a value repeated only right after the same value came (a replayed output)
    or where an earlier value comes again in order (the counting task itself replays)."""
    top = 0
    for c in counts:
        if c > top + 1:
            return False
        top = max(top, c)
    return True


def test_counts_behind_an_intermediate_stream_are_exact_after_sigkills(tmp_path: Path) -> None:
    started = time.monotonic()
    lanes = _lanes(tmp_path, "at-least-once", KILLS, LANES, POINTS)
    replayed = 0
    for lane in lanes:
        found = _found(lane)
        assert set(found["seen"]) == lane["expected"], "nothing is lost"
        replayed += sum(n - 1 for n in found["seen"].values())
        truth = _truth(lane["expected"], lane["dir"])
        assert set(found["counts"]) == set(truth)
        for key, n in truth.items():
            got = found["counts"][key]
            assert sorted(set(got)) == list(range(1, n + 1)) and _runs_up(got), \
                f"{lane['dir']}: key {key}'s counts are {got}, not 1..{n} (with repeats)"
    # the kills made the upstream tasks replay: the skipping was needed
    assert replayed > 0, [lane["kills"] for lane in lanes]
    print(f"{KILLS} kills in {time.monotonic() - started:.1f}s, {replayed} inputs replayed")
