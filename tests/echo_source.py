"""A policy source of the suite's own, added with no edit to the package: ``echo:VALUE``, a policy
whose every action is VALUE. Loaded as a pytest plugin (``-p echo_source``), it registers its
prefix as the package registers ``lerobot:``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pytest_vlaeval.errors import SpecError
from pytest_vlaeval.policy.sources import Given, register_policy_source


class Constant:
    """Every action VALUE, on each of the benchmark's ``action_dim`` dimensions."""

    chunk_size = 1

    def __init__(self, value: float, action_dim: int) -> None:
        self.value, self.action_dim = value, action_dim
        self.name = "echo"
        self.config = {"value": value}

    def reset(self, episode: Any) -> None:
        pass

    def act(self, obs: dict[str, Any]) -> np.ndarray:
        return np.full(self.action_dim, self.value, dtype=np.float32)


@dataclass(frozen=True)
class EchoSource:
    """``echo:VALUE``, run in pytest's own interpreter; refused before any episode where VALUE is
    outside the actions' range, [-1, 1]."""

    value: float
    option: str = field(default="--policy", compare=False)

    PREFIX = "echo:"
    interpreter = None
    server_args = ()
    holds_stacks = ()

    @classmethod
    def parse(cls, text: str, given: Given) -> EchoSource:
        try:
            return cls(float(text.removeprefix(cls.PREFIX)), given.option)
        except ValueError:
            raise SpecError(f"{given.option} {text!r}: expected echo:VALUE, VALUE a number") from None

    @property
    def text(self) -> str:
        return f"{self.PREFIX}{self.value}"

    @property
    def identity(self) -> str:
        return self.text

    def check(self, benchmark: Any) -> None:
        if not -1 <= self.value <= 1:
            raise SpecError(f"{self.option} {self.text!r}: {benchmark.title}'s actions lie in [-1, 1]")

    def factory(self, action_dim: int, benchmark: str) -> Callable[[], Constant]:
        return lambda: Constant(self.value, action_dim)


register_policy_source(EchoSource.PREFIX, EchoSource.parse)
