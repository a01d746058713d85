"""The benchmark scripts run and print the JSON fields RESULTS.md is built from."""

import json

import pytest
from scripts import load_script


def _load(name):
    return load_script(f"benchmarks/{name}.py")


@pytest.mark.parametrize(
    "script, argv",
    [
        ("train_throughput", ["--num-envs", "4", "--num-steps", "8", "--updates", "2",
                              "algo.num_minibatches=2"]),
        ("jaxmarl_ippo_anchor", ["--num-envs", "2", "--updates", "1"]),
    ],
)  # fmt: skip
def test_json_line_has_throughput_fields(script, argv, capfd):
    out = _load(script).main([*argv, "--json"])
    printed = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert printed == pytest.approx(out)
    for key in ("env_steps_per_s", "compile_s", "run_s", "final_return", "env_steps"):
        assert key in printed, key
    assert printed["env_steps_per_s"] > 0 and printed["run_s"] > 0
