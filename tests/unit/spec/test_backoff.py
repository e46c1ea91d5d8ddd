"""The one back-off formula, with each caller's numbers."""

from __future__ import annotations

from reconciler.spec.backoff import backoff_delay


def test_doubles_from_the_base() -> None:
    assert [backoff_delay(5.0, n) for n in (1, 2, 3, 4)] == [5.0, 10.0, 20.0, 40.0]


def test_a_longer_retry_after_wins_a_shorter_does_not() -> None:
    assert backoff_delay(2.0, 3, retry_after=30.0) == 30.0
    assert backoff_delay(2.0, 3, retry_after=1.0) == 8.0


def test_the_engine_reconnect_waits_double_up_to_their_cap() -> None:
    waits, wait = [], 0.5
    for _ in range(7):
        waits.append(wait)
        wait = backoff_delay(wait, 2, cap=10.0)
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
