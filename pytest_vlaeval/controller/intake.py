"""Records into the run's store, held back while the run's recorded policy may still refuse this
session: the first completed episode shows which policy the session runs, and a session refused
for a different one leaves every file of the run as it found it."""

from __future__ import annotations

from pytest_vlaeval.results.record import EpisodeRecord
from pytest_vlaeval.results.store import RunStore


class Intake:
    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.held: list[EpisodeRecord] = []
        """Records kept off the store while a recorded policy may still refuse this session."""
        self.may_refuse = store.holds_policy()
        self.claimed = False

    def add(self, record: EpisodeRecord) -> None:
        """Store ``record`` (or hold it); ``SpecError`` when it shows the run's policy is another."""
        if record.completed and not self.claimed:
            self.store.claim_policy(record)
            self.claimed = True
        if self.claimed or not self.may_refuse:
            self.release()
            self.store.append(record)
        else:
            self.held.append(record)

    def release(self) -> None:
        """Store what was held: the policy is claimed, or the session ends without a completed
        episode to claim it (its errors still count)."""
        held, self.held = self.held, []
        for record in held:
            self.store.append(record)
