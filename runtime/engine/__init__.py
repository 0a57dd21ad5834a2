"""The engine: what every system shares. A container and its tasks, the hand-out of messages in
offset order and what is in flight, the operators' wiring and emit chains, batch runs, event
time and watermarks, records and their codecs, the commit order, checkpoints, virtual tasks,
and the protocols a system implements (``systems``). It imports no system (docs/architecture.md).
"""
