"""A bad record after a ``partition_by`` is one command to get past on Kafka, as on the embedded
local system (``tests/runtime/test_bad_record_after_hop.py``): the error names the record as
``samza-dsl dump --offsets`` shows it in the intermediate topic and the input message it was
written for; the ``--skip`` it prints, run as printed, passes over it and over the copy a
replay writes again; every other trip is applied once. A record of the intermediate topic that
does not decode is dead-lettered once, with its origin, though a replay writes it again."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.runtime.test_bad_record_after_hop import dead_letters_once, skip_after_the_hop


def test_the_printed_skip_gets_past_a_record_that_fails_after_the_hop_on_kafka(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = "-" + uuid.uuid4().hex[:8]
    skip_after_the_hop(tmp_path, {"BADHOP_KAFKA": kafka_bootstrap, "BADHOP_TAG": tag},
                       f"fares{tag}-1")


def test_a_record_after_the_hop_that_does_not_decode_is_dead_lettered_once_on_kafka(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    tag = "-" + uuid.uuid4().hex[:8]
    dead_letters_once(tmp_path, {"BADHOP_KAFKA": kafka_bootstrap, "BADHOP_TAG": tag},
                      f"picky{tag}-1")
