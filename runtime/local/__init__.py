"""The embedded local system: a partitioned log in LMDB on local disk (``log``), the job that runs
on it (``system``: producer, consumer, checkpoints, changelogs, ``LocalJob``), and what keeps its
disk use bounded (``retention``: trimming and retention; ``compaction``: changelog compaction)."""

