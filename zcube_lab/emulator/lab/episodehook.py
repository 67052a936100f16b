"""The pause episodes the lossless agent would record, ready to plug in (adapter: a thread, `tc`,
the wall clock; the episodes' logic is `zcube_lab.core.fabric.pauseepisodes`; docs/LOSSLESS.md,
"Victim accounting").

The agent (`zcube_lab.emulator.lab.lossless`) makes one `EpisodeHook` from its plan when the lab
counts classes (its counting filters' batch file is beside the agent's report), calls
`after_observe` after each `PauseMachine.observe` with the reading's backlogs and the machine's
congested set, `write` with every report it writes (the runner reads both at the load's end), and
`stop` when it ends. The hook never blocks the agent's loop on a counter: a thread reads the
per-class counters (`tc -s -j filter show`, one process per port) of the *warm* ports only (backlog
at least half XOFF: the ones that can become congested) every `period_s`, and an episode's raiser
comes from those readings (the newest before the onset against one a window older). Times are
the wall clock (`time.time()`), as the engines' logs, so the runner lines them up; `write`
and `stop` write `lossless-episodes.jsonl` (one `PauseEpisode` per line) where the runner reads it
(`zcube_lab.emulator.results.lossless.victimlogs`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from zcube_lab.core.fabric.lossless import WATCH_FRACTION, PortThresholds
from zcube_lab.core.fabric.pauseepisodes import ClassBytes, EpisodeRecorder, PauseEpisode
from zcube_lab.emulator.lab.classcounterproc import read

PERIOD_S = 0.05
Reader = Callable[[Iterable[str]], Mapping[str, ClassBytes]]


def warm_ports(backlogs: Mapping[str, int], limits: Mapping[str, PortThresholds]) -> set[str]:
    """The watched ports whose backlog is at least half their XOFF (pure)."""
    return {p for p, b in backlogs.items() if p in limits and b >= limits[p].xoff * WATCH_FRACTION}


class EpisodeHook:
    """Records pause episodes beside the agent: see the module docstring."""

    def __init__(
        self,
        feeds: Mapping[str, frozenset[str]],
        limits: Mapping[str, PortThresholds],
        out: Path,
        period_s: float = PERIOD_S,
        reader: Reader = read,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.recorder = EpisodeRecorder(feeds)
        self.limits = limits
        self.out = out
        self.period_s = period_s
        self.reader = reader
        self.clock = clock
        self._warm: set[str] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="episode-counters", daemon=True)
        self._thread.start()

    def after_observe(self, backlogs: Mapping[str, int], congested: Iterable[str]) -> None:
        """After each observation: note the warm ports, open and close episodes."""
        now = self.clock()
        warm = warm_ports(backlogs, self.limits) | set(congested)
        with self._lock:
            self._warm = warm
            self.recorder.observe(now, congested)

    def _poll(self) -> None:
        while not self._stopping.wait(self.period_s):
            with self._lock:
                ports = sorted(self._warm)
            if not ports:
                continue
            counters = self.reader(ports)
            now = self.clock()
            with self._lock:
                self.recorder.reading(now, counters)

    def write(self) -> Path:
        """Write the episodes so far, the open ones ending now (the runner reads the file while
        the agent runs: at the load's end, with the agent's fresh report); their file."""
        with self._lock:
            episodes = self.recorder.snapshot(self.clock())
        self._write(episodes)
        return self.out

    def stop(self) -> Path:
        """End the thread and every open episode; write the episodes; their file."""
        self._stopping.set()
        self._thread.join(timeout=2)
        with self._lock:
            self.recorder.close_all(self.clock())
            episodes = list(self.recorder.episodes)
        self._write(episodes)
        return self.out

    def _write(self, episodes: list[PauseEpisode]) -> None:
        text = "".join(json.dumps(e.to_dict()) + "\n" for e in episodes)
        part = self.out.with_name(self.out.name + ".part")
        part.write_text(text)
        part.replace(self.out)  # a reader never sees half a file
