"""The MIKASA env factory's original path, named by benchmark files written before ``envs/``."""

from pytest_vlaeval.envs.mikasa import make_env

__all__ = ["make_env"]
