"""aiokafka's own log lines while a job runs (``runtime.kafka.outage.quiet_aiokafka``): none
unless ``SAMZA_DSL_AIOKAFKA_LOG`` asks for them, each once, and one line each, an exception
aiokafka logs with its message shown as its reason, a traceback at ``debug`` only."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from runtime.kafka.outage import quiet_aiokafka


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.extend(self.format(record).splitlines())


def _log_a_failed_send(logger: logging.Logger) -> None:
    try:
        try:
            raise asyncio.IncompleteReadError(b"", 4)
        except asyncio.IncompleteReadError as exc:
            raise ConnectionError("Connection at 127.0.0.1:9 closed") from exc
    except ConnectionError:
        logger.error("Unexpected error in %s routine", "sender", exc_info=True)


@pytest.fixture()
def lines() -> Iterator[tuple[logging.Logger, _Lines]]:
    logger = logging.getLogger("aiokafka.producer.sender")
    handler = _Lines()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield logger, handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        logger.setLevel(logging.NOTSET)


@pytest.mark.parametrize("asked", ["warning", "info"])
def test_an_exception_asked_for_is_one_line_with_its_reasons(
        lines: tuple[logging.Logger, _Lines], monkeypatch: pytest.MonkeyPatch, asked: str) -> None:
    logger, handler = lines
    monkeypatch.setenv("SAMZA_DSL_AIOKAFKA_LOG", asked)
    with quiet_aiokafka():
        _log_a_failed_send(logger)
        _log_a_failed_send(logger)  # the same message again: not shown twice
        logger.warning("Heartbeat send request failed. Will retry.")
    assert handler.lines == [
        "ERROR Unexpected error in sender routine: ConnectionError: Connection at "
        "127.0.0.1:9 closed (from IncompleteReadError: 0 bytes read on a total of 4 expected "
        "bytes)",
        "WARNING Heartbeat send request failed. Will retry."]


def test_debug_keeps_the_traceback(lines: tuple[logging.Logger, _Lines],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    logger, handler = lines
    monkeypatch.setenv("SAMZA_DSL_AIOKAFKA_LOG", "debug")
    with quiet_aiokafka():
        _log_a_failed_send(logger)
    assert handler.lines[0] == "ERROR Unexpected error in sender routine"
    assert "Traceback (most recent call last):" in handler.lines
    assert handler.lines[-1] == "ConnectionError: Connection at 127.0.0.1:9 closed"


def test_nothing_unless_asked(lines: tuple[logging.Logger, _Lines],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    logger, handler = lines
    monkeypatch.delenv("SAMZA_DSL_AIOKAFKA_LOG", raising=False)
    with quiet_aiokafka():
        _log_a_failed_send(logger)
    assert handler.lines == []
