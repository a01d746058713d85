"""benchmarks/lm_policy_throughput.py runs (tiny shapes) and its cached scorer agrees with
the from-scratch baseline it is compared against."""

import json

import pytest
from scripts import load_script

pytestmark = pytest.mark.slow  # a benchmark-script run


def test_lm_policy_throughput_json(capfd):
    bench = load_script("benchmarks/lm_policy_throughput.py")
    argv = ["--shape", "tiny", "--prompts", "3", "--prompt-tokens", "8", "--actions", "4",
            "--action-tokens", "3", "--repeats", "1", "--scratch", "--json"]  # fmt: skip
    out = bench.main(argv)
    printed = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert printed == out
    assert out["prompts_per_s"] > 0 and out["tokens_per_s"] > 0 and out["compile_s"] >= 0
    assert out["max_abs_diff_vs_scratch"] < 1e-4
    # rank-8 q and v adapters on a 2-layer, d_model 32 model: 2 * 8 * (32 + 32 + 32 + 16)
    assert out["lora_params"] == 1792 and out["lora_bytes"] == 4 * 1792
    assert out["lora_checkpoint_bytes"] > 0


def test_lm_trainer_speed_json(capfd):
    bench = load_script("benchmarks/lm_trainer_speed.py")
    argv = ["--model", "tiny", "--top", "last:1", "--num-steps", "4", "--iterations", "3",
            "--json"]  # fmt: skip
    out = bench.main(argv)
    printed = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert printed == out
    for arm in ("all", "top"):
        assert out[f"{arm}_env_steps_per_s"] > 0 and out[f"{arm}_tokens_per_s"] > 0
        assert len(out["arms"][arm]["iteration_s"]) == 2  # the compiling iteration untimed
    assert out["speedup"] == pytest.approx(
        out["top_env_steps_per_s"] / out["all_env_steps_per_s"], rel=1e-2
    )
    # the timed iterations meet prompts kept from earlier ones
    assert 0 < out["trunk_hit_rate"] <= 1 and out["arms"]["all"]["trunk_hit_rate"] is None
    assert out["messages"] == "teammate_observation" and out["prompt_length_step"] == 16


def test_lm_trainer_speed_twosome_at_the_full_prompt_length(capfd):
    bench = load_script("benchmarks/lm_trainer_speed.py")
    argv = ["--model", "tiny", "--top", "last:1", "--num-steps", "2", "--iterations", "2",
            "--messages", "none", "--prompt-length-step", "96", "--json"]  # fmt: skip
    out = bench.main(argv)
    assert out["messages"] == "none" and out["prompt_length_step"] == 96
    assert out["arms"]["all"]["decisions"] == out["arms"]["top"]["decisions"]
    with pytest.raises(SystemExit):
        bench.main([*argv[:-3], "--prompt-length-step", "0"])
    assert "--prompt-length-step must be > 0" in capfd.readouterr().err


@pytest.mark.parametrize("layers", ["all", "last:1"])
def test_lm_prompt_packing_json(capfd, layers):
    bench = load_script("benchmarks/lm_prompt_packing.py")
    argv = ["--model", "tiny", "--lora-layers", layers, "--prompts", "6", "--repeats", "2",
            "--messages", "teammate_observation", "--json"]  # fmt: skip
    out = bench.main(argv)
    assert json.loads(capfd.readouterr().out.strip().splitlines()[-1]) == out
    assert out["prompts"] == 6 and out["full_length"] == 96
    assert out["prompt_tokens_mean"] <= out["packed_length_mean"] < 96
    assert out["max_abs_log_prob_diff"] < 1e-4  # the same policy either way
    assert out["speedup"] == pytest.approx(
        out["packed_prompts_per_s"] / out["full_length_prompts_per_s"], rel=1e-2
    )
