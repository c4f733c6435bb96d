"""When clients are online: sessions drawn with the seed, or read from a trace.

A client is online during its sessions, half-open intervals [start, end) of virtual seconds.
A trace's sessions may repeat with a period (FedScale's behaviour trace: time modulo its
`finish_time`). Drawn sessions alternate on and off: on for Exp(mean session), off for
Exp(mean session x (1 - f) / f), so a client is online a fraction f of the time, starting
online with probability f; they are drawn per client from (seed, partition) alone and
extended as the clock advances, so a resumed run sees the same sessions.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from fl_system.learning.seeding import derive_seed

_SESSION_SALT = 0x0A7A  # separates availability draws from the other seeds of a client


class Sessions:
    """One client's online intervals: given, repeating with `period`, or drawn as needed."""

    def __init__(
        self,
        intervals: Iterable[tuple[float, float]] = (),
        *,
        period: float | None = None,
        more: Iterator[tuple[float, float]] | None = None,
    ) -> None:
        pairs = sorted((float(s), float(e)) for s, e in intervals if e > s)
        self.starts = [s for s, _ in pairs]
        self.ends = [e for _, e in pairs]
        self.period = period
        self._more = more

    def _cover(self, t: float) -> None:
        """Draw sessions until they reach past `t` (drawn sessions only)."""
        while self._more is not None and (not self.ends or self.ends[-1] <= t):
            start, end = next(self._more)
            self.starts.append(start)
            self.ends.append(end)

    def _cycle(self, t: float) -> tuple[float, float]:
        """(offset of t's period, t within it)."""
        if self.period is None:
            return 0.0, t
        base = math.floor(t / self.period) * self.period
        return base, t - base

    def online(self, t: float) -> bool:
        self._cover(t)
        _, local = self._cycle(t)
        i = bisect.bisect_right(self.starts, local) - 1
        return i >= 0 and local < self.ends[i]

    def session_end(self, t: float) -> float:
        """When the session holding `t` ends (`t` itself if offline; inf if never)."""
        end = t
        for _ in range(1_000):  # sessions that touch (a period's last and the next first) join
            if not self.online(end):
                return end
            base, local = self._cycle(end)
            i = bisect.bisect_right(self.starts, local) - 1
            if math.isinf(self.ends[i]):
                return math.inf
            end = base + self.ends[i]
        return math.inf

    def next_start(self, t: float) -> float:
        """The first time >= t the client is online (inf if never again)."""
        if self.online(t):
            return t
        self._cover(t)
        base, local = self._cycle(t)
        i = bisect.bisect_right(self.starts, local)
        if i < len(self.starts):
            return base + self.starts[i]
        if self.period is not None and self.starts:
            return base + self.period + self.starts[0]
        return math.inf


def drawn_sessions(seed: int, partition: int, fraction: float, mean_session: float) -> Sessions:
    """Alternating on/off sessions, online a share `fraction` of the time."""
    if fraction >= 1:
        return Sessions([(0.0, math.inf)])
    rng = np.random.default_rng(derive_seed(seed, partition, _SESSION_SALT))
    mean_off = mean_session * (1 - fraction) / fraction

    def sessions() -> Iterator[tuple[float, float]]:
        t = 0.0 if rng.random() < fraction else float(rng.exponential(mean_off))
        while True:
            end = t + float(rng.exponential(mean_session))
            yield t, end
            t = end + float(rng.exponential(mean_off))

    return Sessions(more=sessions())


class Availability:
    """Every client's sessions, by partition id."""

    def __init__(self, sessions: Mapping[int, Sessions]) -> None:
        self.sessions = dict(sessions)

    def online(self, partitions: Sequence[int], t: float) -> list[int]:
        return [p for p in partitions if self.sessions[p].online(t)]

    def session_end(self, partition: int, t: float) -> float:
        return self.sessions[partition].session_end(t)

    def next_online(self, partitions: Sequence[int], t: float) -> float:
        """The first time >= t at which one of `partitions` is online (inf if none ever is)."""
        return min((self.sessions[p].next_start(t) for p in partitions), default=math.inf)


def drawn(seed: int, num_clients: int, fraction: float, mean_session: float) -> Availability:
    return Availability(
        {p: drawn_sessions(seed, p, fraction, mean_session) for p in range(num_clients)}
    )
