"""The log handler: lines of one event-loop turn are written together, in order, and none waits longer."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
import threading

from reconciler.logs import ConsoleFormatter, JsonFormatter, TextFormatter, TurnHandler


class CountingStream(io.StringIO):
    """Counts writes, to see lines batched."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def make_logger(stream: CountingStream) -> logging.Logger:
    handler = TurnHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger(f"test.turn.{id(stream)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    return logger


def test_outside_a_loop_each_line_is_written_at_once() -> None:
    stream = CountingStream()
    logger = make_logger(stream)
    logger.info("one")
    assert stream.getvalue() == "one\n"
    logger.info("two")
    assert (stream.getvalue(), stream.writes) == ("one\ntwo\n", 2)


def test_the_lines_of_one_loop_turn_are_written_together_at_its_end() -> None:
    stream = CountingStream()
    logger = make_logger(stream)

    async def main() -> None:
        for i in range(100):
            logger.info("run %d", i)
        assert stream.getvalue() == ""  # not yet: the turn is not over
        await asyncio.sleep(0)  # the turn ends: the flush scheduled at the first line runs
        assert stream.getvalue() == "".join(f"run {i}\n" for i in range(100))
        assert stream.writes == 1
        logger.info("next turn")
        await asyncio.sleep(0)

    asyncio.run(main())
    assert stream.getvalue().endswith("run 99\nnext turn\n")
    assert stream.writes == 2


def test_a_line_from_another_thread_keeps_the_order() -> None:
    stream = CountingStream()
    logger = make_logger(stream)

    async def main() -> None:
        logger.info("in the loop")
        thread = threading.Thread(target=logger.info, args=("from a thread",))
        thread.start()
        thread.join()  # written at once, after the loop's pending line
        assert stream.getvalue() == "in the loop\nfrom a thread\n"

    asyncio.run(main())


def test_a_line_logged_as_the_loop_ends_is_not_lost() -> None:
    stream = CountingStream()
    logger = make_logger(stream)

    async def main() -> None:
        logger.info("last words")

    asyncio.run(main())
    logger.handlers[0].flush()  # what cli.main does before it returns (flush_logs)
    assert stream.getvalue() == "last words\n"


def test_a_loop_that_stops_before_its_flush_does_not_hold_back_the_next_loops_lines() -> None:
    stream = CountingStream()
    logger = make_logger(stream)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(asyncio.sleep(0))

    async def log_and_stop() -> None:
        logger.info("first loop")
        asyncio.get_running_loop().stop()  # stops before the flush scheduled for this turn runs

    stopping = loop.create_task(log_and_stop())
    loop.run_forever()
    assert stopping.done()
    loop.close()

    async def main() -> None:
        logger.info("second loop")
        await asyncio.sleep(0)
        assert stream.getvalue() == "first loop\nsecond loop\n"

    asyncio.run(main())


def test_the_text_format_is_loggings_own_line_for_plain_records_and_records_with_a_traceback() -> None:
    ours = TextFormatter()
    reference = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    reference.formatTime = ours.formatTime  # type: ignore[method-assign]  # the same time text
    plain = logging.LogRecord("reconciler.engine", logging.INFO, "x", 1, "run %s: %d ms", ("a/b", 3), None)
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("reconciler.engine", logging.ERROR, "x", 1, "failed %s", ("a/b",), sys.exc_info())
    for record in (plain, failed):
        assert ours.format(record) == reference.format(record)
    assert ours.format(plain).endswith(" INFO reconciler.engine: run a/b: 3 ms")
    assert ours.format(failed).endswith("ValueError: boom")


def test_ups_console_lines_have_the_form_of_its_run_lines() -> None:
    """`up` prints `[HH:MM:SS] run …` and `[HH:MM:SS] Plan: …`; its warnings read alike, not as a log file's lines."""
    record = logging.LogRecord("reconciler.engine", logging.WARNING, "x", 1, "database %s", ("unavailable",), None)
    record.created = 1_796_601_600.0 + 3_723  # 2026-12-07 01:02:03 UTC
    assert ConsoleFormatter().format(record) == "[01:02:03] warning: database unavailable"


def test_a_json_line_holds_the_whole_traceback_in_one_field() -> None:
    stream = CountingStream()
    handler = TurnHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("test.json.traceback")
    logger.handlers[:] = [handler]
    logger.propagate = False

    def inner() -> None:
        raise ValueError("boom\nsecond line")

    try:
        inner()
    except ValueError:
        logger.exception("run %s failed inside the engine", "a/b")
    [line] = stream.getvalue().splitlines()
    event = json.loads(line)
    assert event["message"] == "run a/b failed inside the engine"
    trace = event["exception"].splitlines()
    assert trace[0] == "Traceback (most recent call last):"
    assert any("in inner" in frame for frame in trace)  # where it failed, not only what
    assert trace[-2:] == ["ValueError: boom", "second line"]
