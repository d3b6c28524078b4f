"""Records into the run's store, held back while the run's recorded policy may still refuse this
session: the first completed episode shows which policy the session runs, and a session refused
for a different one leaves every file of the run as it found it, the hosts its fingerprint
records too (this session's joins them with its first record stored)."""

from __future__ import annotations

from pytest_vlaeval.results.record import EpisodeRecord
from pytest_vlaeval.results.store import RunStore
from pytest_vlaeval.schema import Machine


class Intake:
    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.held: list[EpisodeRecord] = []
        """Records kept off the store while a recorded policy may still refuse this session."""
        self.may_refuse = store.holds_policy()
        self.claimed = False
        self.host: Machine | None = None
        """This session's host, until the first record it stores records it among the run's."""

    def add(self, record: EpisodeRecord) -> None:
        """Store ``record`` (or hold it); ``SpecError`` when it shows the run's policy is another."""
        if record.completed and not self.claimed:
            self.store.claim_policy(record)
            self.claimed = True
        if self.claimed or not self.may_refuse:
            self.release()
            self._store(record)
        else:
            self.held.append(record)

    def release(self) -> None:
        """Store what was held: the policy is claimed, or the session ends without a completed
        episode to claim it (its errors still count)."""
        held, self.held = self.held, []
        for record in held:
            self._store(record)

    def _store(self, record: EpisodeRecord) -> None:
        if self.host is not None:
            self.store.join_machines([self.host])
            self.host = None
        self.store.append(record)
