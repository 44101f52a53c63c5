"""`serving.sglang.fleet` without starting anything: SGLang settings as `launch_server` flags, the CPU cores each
server gets, and the world's `serving.router` (a policy of SGLang's router, or none) as the opener receives it.
The servers and the router themselves run in tests/sglang/live/test_router.py."""
import pytest

from acceptmoe.experiments.spine.config import ConfigKeyError, load_world
from acceptmoe.serving.sglang.fleet import POLICIES, cli_args, core_groups


def test_settings_become_launch_server_flags():
    assert cli_args({"model_path": "/m", "tp_size": 2, "disable_cuda_graph": True, "disable_overlap_schedule": False,
                     "dtype": None}) == ["--model-path", "/m", "--tp-size", "2", "--disable-cuda-graph"]


def test_each_server_binds_its_own_tp_core_groups():
    assert core_groups("0|1", 2) == ["0", "1"]
    assert core_groups("0-1|2-3|4-5|6-7", 2) == ["0-1|2-3", "4-5|6-7"]      # tp 2: two rank groups per server
    assert core_groups(None, 2) == [None, None]


def test_the_world_names_the_router_policy_or_none():
    world = load_world("tiny", {"serving.dp": 2})
    assert world.serving.router == "round_robin" and "round_robin" in POLICIES
    assert world.serving.settings(world, world.models[0])["router"] == "round_robin"
    world = load_world("tiny", {"serving.dp": 2, "serving.router": "none"})
    assert world.serving.settings(world, world.models[0])["router"] is None       # SGLang's own dp_size
    with pytest.raises(ConfigKeyError, match="serving.router: 'fastest' is not a router policy"):
        load_world("tiny", {"serving.router": "fastest"})
