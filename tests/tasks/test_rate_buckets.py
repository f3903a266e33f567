"""The request and token budgets (``TANDEM_<ROLE>_RPM``/``_TPM``, ``tandem.tasks.hosts.rate_buckets``)
pace calls: a burst of ``TANDEM_RATE_BURST_SECONDS`` worth of the limit at most, then a continuous
refill; any 60 s window gets at most the limit, any 1 s window at most the burst plus a second's
worth (plus ``GRACE`` seconds' worth while calls come back late for their turns).

The scripts run on fakeredis with its clock (Redis's ``TIME``, the only clock the scripts read)
driven by the test. A *greedy* caller asks again as soon as a ``Wait`` says (or ``late`` seconds
after): it gets every call the budget allows, the most a host can ever see.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import fakeredis
import pytest
from fakeredis.commands_mixins import server_mixin

from tandem.tasks.hosts.capacity import Grant, HostCapacity, HostLimits, Wait, snapshot
from tandem.tasks.hosts.rate_buckets import GRACE, bucket

START = 1_800_000_000.0


class FakeClock:
    """Stands in for the ``time`` module of fakeredis's ``TIME`` command."""

    def __init__(self) -> None:
        self.now = START

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    fake = FakeClock()
    monkeypatch.setattr(server_mixin, "time", fake)
    yield fake


def limiter(**limits: float) -> HostCapacity:
    return HostCapacity(fakeredis.FakeRedis(), "t", HostLimits("http://h/v1", **limits))  # type: ignore[arg-type]


def greedy(
    cap: HostCapacity, clock: FakeClock, seconds: float, tokens: int = 1, late: float = 0.0
) -> list[tuple[float, int]]:
    """Call as often as the budget allows for ``seconds``, coming back ``late`` seconds after each
    turn: ``(when, tokens)`` of each grant, from 0."""
    start, granted = clock.now, []
    while clock.now - start < seconds:
        got = cap.acquire(tokens)
        if isinstance(got, Grant):
            granted.append((clock.now - start, tokens))
            cap.release(got)  # the estimate stands: the host used what was debited
        else:
            assert got.until > clock.now, got
            clock.now = got.until + late
    return granted


def most_in_any_window(granted: list[tuple[float, int]], window: float) -> int:
    """The most units granted in any half-open window ``[t, t + window)`` (one starts at a grant)."""
    return max(sum(n for u, n in granted if t <= u < t + window) for t, _ in granted)


def test_rpm_60_gives_one_request_a_second_and_at_most_60_a_minute(clock: FakeClock) -> None:
    cap = limiter(rpm=60)  # the default burst: one second's worth, here one request
    shape = bucket(60, 1.0, whole=True)
    assert shape.burst == 1 and shape.rate == pytest.approx(60 / 60.5)
    granted = greedy(cap, clock, 180)
    assert [t for t, _ in granted[:3]] == pytest.approx([0.0, 60.5 / 60, 2 * 60.5 / 60], abs=1e-5)
    assert most_in_any_window(granted, 1.0) == 1  # before: 60 at once, then one a second
    assert most_in_any_window(granted, 60.0) == 60
    assert len(granted) == 179  # 180 s at 59.5 a minute


def test_a_call_late_for_its_turn_within_the_grace_loses_nothing(clock: FakeClock) -> None:
    spacing = 1 / bucket(60, 1.0, whole=True).rate
    late = [t for t, _ in greedy(limiter(rpm=60), clock, 120, late=0.8 * GRACE)]
    gaps = [b - a for a, b in itertools.pairwise(late[1:])]  # the first: the first lateness
    assert gaps == pytest.approx([spacing] * len(gaps), abs=1e-4)  # the refill waited for each
    assert most_in_any_window([(t, 1) for t in late], 60.0) <= 60
    # later than the grace: the bucket, full meanwhile, drops the refill, and the pace slows down
    later = [t for t, _ in greedy(limiter(rpm=60), clock, 120, late=2.0)]
    assert all(b - a > spacing + 1 for a, b in itertools.pairwise(later[1:]))


def test_a_burst_then_the_pace_never_more_than_the_limit_in_60s(clock: FakeClock) -> None:
    cap = limiter(rpm=600, burst_seconds=6)  # a tenth of a minute: 60 requests at once
    shape = bucket(600, 6, whole=True)
    assert shape.burst == 60 and shape.rate == pytest.approx(541 / 60.5)
    assert len(greedy(cap, clock, 0.001)) == 60
    clock.advance(30)  # idle: the bucket fills again, to its burst and no more
    granted = greedy(cap, clock, 300)
    assert sum(1 for t, _ in granted if t < 1e-9) == 60
    assert most_in_any_window(granted, 60.0) <= 600
    assert most_in_any_window(granted, 1.0) <= 60 + shape.rate * (1 + GRACE)
    late = [g for g in granted if 120 <= g[0] < 180]  # once the burst is spent: the refill
    assert len(late) == pytest.approx(shape.rate * 60, abs=1)


def test_an_idle_then_greedy_fleet_still_gets_at_most_the_limit_in_any_minute(clock: FakeClock) -> None:
    cap = limiter(rpm=120, burst_seconds=5)  # burst 10
    shape = bucket(120, 5, whole=True)
    granted: list[tuple[float, int]] = []
    offset = 0.0
    for busy, idle, late in [(7.0, 3.0, 0.0), (20.0, 15.0, 0.4), (50.0, 30.0, 0.2), (90.0, 0.0, 0.0)]:
        start = clock.now
        granted += [(offset + t, n) for t, n in greedy(cap, clock, busy, late=late)]
        clock.advance(idle)
        offset += clock.now - start
    assert most_in_any_window(granted, 60.0) <= 120
    assert most_in_any_window(granted, 1.0) <= 10 + shape.rate * (1 + GRACE)


def test_tpm_paces_tokens_as_estimated(clock: FakeClock) -> None:
    cap = limiter(tpm=50_000)  # a burst of 833 tokens
    shape = bucket(50_000, 1.0, whole=False)
    granted = greedy(cap, clock, 180, tokens=400)
    assert sum(n for t, n in granted if t < 1.0) <= shape.burst + shape.rate  # before: 50,000
    assert most_in_any_window(granted, 60.0) <= 50_000
    assert most_in_any_window(granted, 1.0) <= shape.burst + shape.rate * (1 + GRACE)


def test_a_call_larger_than_the_burst_goes_alone_and_the_next_wait_for_its_debt(clock: FakeClock) -> None:
    cap = limiter(tpm=6000, burst_seconds=10)  # 1000 tokens of burst
    shape = bucket(6000, 10, whole=False)
    assert shape.burst == 1000 and shape.rate == pytest.approx(5000 / 60.5)
    big = cap.acquire(4000)
    assert isinstance(big, Grant)  # never starved: a bucket holding its burst lets it through
    refused = cap.acquire(100)
    assert isinstance(refused, Wait) and refused.reason == "tpm"
    assert refused.seconds == pytest.approx((3000 + 100) / shape.rate, rel=1e-4)
    clock.advance(120)
    granted = greedy(cap, clock, 240, tokens=4000)
    assert most_in_any_window(granted, 60.0) <= 6000 + 4000 - 1000  # the limit, plus one call's excess


def test_real_usage_corrects_the_estimate(clock: FakeClock) -> None:
    cap = limiter(tpm=6000, burst_seconds=10)  # 1000 tokens of burst
    first = cap.acquire(400)
    second = cap.acquire(400)
    assert isinstance(first, Grant) and isinstance(second, Grant)
    refused = cap.acquire(400)  # 200 left
    assert isinstance(refused, Wait) and refused.reason == "tpm"
    cap.release(first, used_tokens=100)  # 300 fewer than estimated: refunded
    assert isinstance(cap.acquire(400), Grant)
    cap.release(second, used_tokens=1400)  # 1000 more: the bucket goes below zero
    refused = cap.acquire(10)
    assert isinstance(refused, Wait) and refused.seconds > 10  # a debt of about 900 at 83/s
    snap = snapshot(cap.redis, cap.prefix, cap.limits)
    assert snap.tokens_available is not None and snap.tokens_available < 0
    assert snap.tokens_burst == 1000.0


def test_no_burst_is_plain_pacing(clock: FakeClock) -> None:
    cap = limiter(rpm=6000, burst_seconds=0)
    shape = bucket(6000, 0, whole=True)
    assert (shape.burst, shape.rate) == (1.0, pytest.approx(6000 / 60.5))
    granted = greedy(cap, clock, 10)
    assert most_in_any_window(granted, 1.0) == 100  # one request every 10 ms, none at once
    assert bucket(100_000, 0, whole=False).burst == 0.0  # a call goes once its debt is paid


def test_the_snapshot_reads_the_buckets_as_the_scripts_fill_them(clock: FakeClock) -> None:
    cap = limiter(rpm=600, tpm=60_000, burst_seconds=2)  # 20 requests, 2000 tokens
    requests, tokens = bucket(600, 2, whole=True), bucket(60_000, 2, whole=False)
    for _ in range(5):
        assert isinstance(cap.acquire(100), Grant)
    snap = snapshot(cap.redis, cap.prefix, cap.limits)
    assert (snap.requests_burst, snap.tokens_burst) == (20.0, 2000.0)
    assert (snap.requests_available, snap.tokens_available) == (15.0, 1500.0)
    clock.advance(0.5)
    snap = snapshot(cap.redis, cap.prefix, cap.limits)
    assert snap.requests_available == pytest.approx(15 + 0.5 * requests.rate)
    assert snap.tokens_available == pytest.approx(1500 + 0.5 * tokens.rate)
    clock.advance(60.0)
    snap = snapshot(cap.redis, cap.prefix, cap.limits)
    assert (snap.requests_available, snap.tokens_available) == (20.0, 2000.0)  # never past the burst


@pytest.mark.parametrize("burst", [-1.0, 31.0])
def test_a_burst_outside_0_to_30_seconds_is_refused(burst: float) -> None:
    with pytest.raises(ValueError, match="burst_seconds"):
        HostLimits("h", rpm=60, burst_seconds=burst)


def test_calls_sent_back_together_get_one_turn_each(clock: FakeClock) -> None:
    """Refused together, they are told successive turns, each when the budget will have refilled
    for it; coming back then, each goes (before: all were told the same moment, one went, and the
    rest came back again and again, every second)."""
    cap = limiter(rpm=60, tpm=60_000)  # 1 request and 1000 tokens of burst
    spacing = 1 / bucket(60, 1.0, whole=True).rate
    assert isinstance(cap.acquire(100), Grant)
    refused = [cap.acquire(100) for _ in range(5)]
    assert all(isinstance(w, Wait) and w.reason == "rpm" for w in refused)
    expected = [spacing * k for k in range(1, 6)]
    assert [w.until - START for w in refused] == pytest.approx(expected, abs=1e-3)  # type: ignore[union-attr]
    for wait in refused:
        clock.now = wait.until + 0.1  # type: ignore[union-attr]  # a little late, as a step is
        assert isinstance(cap.acquire(100), Grant)

    tokens = limiter(tpm=6000)  # 100 tokens of burst
    rate = bucket(6000, 1.0, whole=False).rate
    assert isinstance(tokens.acquire(100), Grant)
    turns = [tokens.acquire(500) for _ in range(3)]
    assert all(isinstance(w, Wait) and w.reason == "tpm" for w in turns)
    start = clock.now
    # the first when 100 tokens are back; each next one a whole estimate (500 tokens) later
    expected = [100 / rate, 600 / rate, 1100 / rate]
    assert [w.until - start for w in turns] == pytest.approx(expected, abs=1e-3)  # type: ignore[union-attr]
    for wait in turns:
        clock.now = wait.until  # type: ignore[union-attr]
        assert isinstance(tokens.acquire(500), Grant)
