"""Each built-in benchmark's ``lerobot.features`` is what LeRobot itself says its policies read of
that benchmark's observations: asked of LeRobot's ``EnvConfig`` for the file's ``env_type``, in
LeRobot's interpreter. LeRobot names them in the env config's ``features_map`` (of the keys the
benchmark's ``policy_obs_keys`` give), then its env processors rename them (LIBERO's flattens
``robot_state`` into ``observation.state``). The keys differ where LeRobot's env wrapper renames
(LIBERO's cameras) or its map names a dict the env never gives (Meta-World's ``pixels/top``, one
image), so the names are compared. Needs ``vlaeval install lerobot``; fails, never skips, without it."""

from __future__ import annotations

import json
import subprocess

import pytest
from lerobot_reference import lerobot_python

from pytest_vlaeval.benchmark.model import builtin_benchmarks, load_benchmark

ASK = """
import json, sys
from lerobot.configs.types import FeatureType
from lerobot.envs.configs import EnvConfig

names = {}
for benchmark, (env_type, given) in json.loads(sys.argv[1]).items():
    config = EnvConfig.get_choice_class(env_type)()
    by_type = {}
    for key, feature in config.features.items():
        if key.split("/")[0] in given:
            by_type.setdefault(feature.type, {})[config.features_map[key]] = feature
    preprocessor, _ = config.get_env_processors()
    read = preprocessor.transform_features(by_type)
    names[benchmark] = sorted(name for kind, features in read.items() if kind is not FeatureType.ACTION for name in features)
print(json.dumps(names))
"""


@pytest.mark.lerobot
def test_each_benchmarks_features_are_lerobots_names_for_its_observations() -> None:
    benchmarks = {name: load_benchmark(path) for name, path in sorted(builtin_benchmarks().items())}
    asked = {
        name: [b.lerobot.env_type, list(b.env.policy_obs_keys)] for name, b in benchmarks.items() if b.lerobot.env_type
    }
    assert sorted(asked) == ["aloha", "lerobot-libero", "metaworld", "pusht"]
    proc = subprocess.run(
        [str(lerobot_python()), "-c", ASK, json.dumps(asked)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lerobots = json.loads(proc.stdout.splitlines()[-1])
    ours = {name: sorted(benchmarks[name].lerobot.features.values()) for name in asked}
    assert ours == lerobots
