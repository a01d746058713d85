"""The benchmark scripts run and print the JSON fields RESULTS.md is built from."""

import json

import pytest
from scripts import load_script


def _load(name):
    return load_script(f"benchmarks/{name}.py")


@pytest.mark.slow  # a benchmark-script run
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


@pytest.mark.slow  # a benchmark-script run
def test_throughput_difference_of_two_budgets(capfd):
    argv = ["--num-envs", "4", "--num-steps", "8", "--updates", "3", "--minus-updates", "1"]
    out = _load("train_throughput").main([*argv, "algo.num_minibatches=2", "--json"])
    assert out["minus_updates"] == 1 and out["updates"] == 3
    assert out["diff_s"] == pytest.approx(out["run_s"] - out["base_run_s"])
    # two updates of 4 envs x 8 steps in diff_s
    assert out["diff_env_steps_per_s"] == pytest.approx(64 / out["diff_s"])


@pytest.mark.slow  # a benchmark-script run
def test_render_throughput_prices_a_random_tower_of_the_given_shape(capfd):
    shape = ["--grid", "4", "--vision-width", "32", "--vision-layers", "1", "--vision-heads", "2"]
    out = _load("render_throughput").main(
        ["--batch", "2", "--size", "32", "--repeats", "1", *shape, "--json"]
    )
    printed = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert printed["weights"] == out["weights"] == "random"
    tower = printed["tower"]
    assert (tower["image_size"], tower["patch_size"], tower["vision_width"]) == (32, 8, 32)
    assert (tower["vision_layers"], tower["vision_heads"], tower["vision_mlp_dim"]) == (1, 2, 128)
    # patch conv 8*8*3*32, class and 17 positions, 2 LNs, one layer, projection 32 -> 128
    layer = 2 * 2 * 32 + 4 * (32 * 32 + 32) + (32 * 128 + 128) + (128 * 32 + 32)
    want = 8 * 8 * 3 * 32 + 32 + 17 * 32 + 2 * 2 * 32 + layer + 32 * 128 + 1
    assert printed["tower_parameters"] == want
    assert printed["potential_ms_per_state"] == pytest.approx(printed["potential_ms"] / 2)
    assert printed["potential_ms"] > 0 and printed["render_ms"] > 0


def test_render_throughput_grid_must_divide_the_size():
    with pytest.raises(SystemExit, match="--size 30 is not a multiple of --grid 4"):
        _load("render_throughput").main(["--size", "30", "--grid", "4"])


def test_throughput_mesh_needs_the_devices():
    from jaxmarl_llm.errors import ConfigError

    with pytest.raises(ConfigError, match="xla_force_host_platform_device_count"):
        _load("train_throughput").main(
            ["--num-envs", "4", "--num-steps", "8", "--updates", "1", "--mesh-devices", "64"]
        )


def test_gpu_suite_keeps_what_finished_and_names_what_failed(tmp_path, monkeypatch, capsys):
    suite = _load("gpu_suite")
    (tmp_path / "ok.py").write_text(
        "import json, sys\nprint('a note on stdout')\n"
        "print(json.dumps({'env_steps_per_s': 5.0, 'argv': sys.argv[1:]}))\n"
    )
    (tmp_path / "bad.py").write_text("raise SystemExit('no such env: mpe:nope')\n")
    (tmp_path / "slow.py").write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(suite, "HERE", tmp_path)
    monkeypatch.setattr(suite, "SUITE", [
        ("ok", "ok.py", ["--num-envs", "1000"], 30),
        ("bad", "bad.py", [], 30),
        ("slow", "slow.py", [], 2),
        ("skipped", "ok.py", [], 30),
    ])  # fmt: skip
    out = tmp_path / "r.jsonl"
    # 31 s: "skipped" needs 30 s and "slow" spends 2 s before it
    suite.main(["--out", str(out), "--scale", "0.5", "--budget", "31"])
    rows = {r["item"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["ok"]["env_steps_per_s"] == 5.0
    assert rows["ok"]["argv"] == ["--num-envs", "496", "--json"]  # scaled to a multiple of 8
    assert rows["bad"]["rc"] == 1 and "no such env: mpe:nope" in rows["bad"]["stderr_tail"]
    assert rows["slow"]["rc"] == "timeout"
    assert "skipped" not in rows and "skip skipped" in capsys.readouterr().out


def test_gpu_suite_passes_the_jaxmarl_checkout_to_the_anchors_that_need_it(
    tmp_path, monkeypatch, capsys
):
    suite = _load("gpu_suite")
    echo = "import json, sys\nprint(json.dumps({'argv': sys.argv[1:]}))\n"
    (tmp_path / "ours.py").write_text(echo)
    (tmp_path / "jaxmarl_qmix_rnn_anchor.py").write_text(echo)
    monkeypatch.setattr(suite, "HERE", tmp_path)
    monkeypatch.setattr(suite, "SUITE", [
        ("ours", "ours.py", ["--num-envs", "4096", "algo.buffer_size=131072"], 30),
        ("anchor", "jaxmarl_qmix_rnn_anchor.py",
         ["--num-envs", "4096", "--buffer-size", "131072"], 30),
    ])  # fmt: skip
    without, with_checkout = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    suite.main(["--out", str(without), "--budget", "60"])
    assert [json.loads(r)["item"] for r in without.read_text().splitlines()] == ["ours"]
    assert "skip anchor: needs --jaxmarl" in capsys.readouterr().out
    suite.main(["--out", str(with_checkout), "--budget", "60", "--scale", "0.01"])
    suite.main(["--out", str(with_checkout), "--budget", "60", "--jaxmarl", "/ckpt/JaxMARL"])
    rows = [json.loads(r) for r in with_checkout.read_text().splitlines()]
    assert [r["item"] for r in rows] == ["ours", "ours", "anchor"]
    # scaled: 40 envs, and buffers of 32 rollouts of each (the most a sample may need)
    assert rows[0]["argv"] == ["--num-envs", "40", "algo.buffer_size=1310", "--json"]
    assert rows[2]["argv"] == [
        "--num-envs", "4096", "--buffer-size", "131072", "--json", "--jaxmarl", "/ckpt/JaxMARL",
    ]  # fmt: skip


@pytest.mark.slow  # a benchmark-script run
def test_dpm_scoring_reports_both_layouts_with_the_same_rewards(capfd):
    out = _load("dpm_scoring").main(["--items", "2", "--steps", "4", "--repeats", "1", "--json"])
    assert json.loads(capfd.readouterr().out.strip().splitlines()[-1]) == pytest.approx(out)
    assert out["max_reward_difference"] < 1e-5
    assert out["ms_from_vectors"] > 0 and out["ms_from_env_states"] > 0
    assert 0 < out["stored_bytes_per_step_vectors"] < out["stored_bytes_per_step_env_states"]


def test_shaping_overhead_gives_shaped_overrides_to_the_shaped_run_only(monkeypatch):
    import sys
    import types

    calls = []

    def throughput(argv):
        calls.append(argv)
        return {"env_steps_per_s": 100.0 if len(calls) == 1 else 80.0, "device": "cpu"}

    monkeypatch.setitem(sys.modules, "train_throughput", types.SimpleNamespace(main=throughput))
    argv = ["--shaper", "dpm", "--shaped-override", "shaping.kwargs.pessimism=1", "--json"]
    out = _load("shaping_overhead").main([*argv, "env.kwargs.reward=strong_sparse"])
    plain, shaped = calls
    common = "env.kwargs.reward=strong_sparse"
    assert common in plain and common in shaped
    assert not any("pessimism" in a or a.startswith("shaping.") for a in plain)
    assert "shaping.name=dpm" in shaped and shaped[-1] == "shaping.kwargs.pessimism=1"
    assert out["overhead_fraction"] == pytest.approx(0.2)
    assert out["shaped_overrides"] == ["shaping.kwargs.pessimism=1"]


def test_golden_runs_compare_numbers_not_names():
    golden = load_script("benchmarks/golden_runs.py")
    ref = {
        "metrics": {"loss": [1.0, float("nan")], "episode_return": [-3.0, -2.0]},
        "leaves": [["(2,)", 0.5], ["(2,)", 1.5], ["()", 7.0]],
    }
    # the same numbers in another leaf order (a state field moved or renamed): no difference
    same = {"metrics": dict(ref["metrics"]), "leaves": [["()", 7.0], ["(2,)", 1.5], ["(2,)", 0.5]]}
    assert golden.differences(ref, same) == []
    changed = {
        "metrics": {"loss": [1.0, 0.0], "episode_return": [-3.0, -2.0 + 1e-3]},
        "leaves": [["(2,)", 0.5], ["(2,)", 1.6], ["()", 7.0]],
    }
    diff = golden.differences(ref, changed)
    assert len(diff) == 3 and diff[0].startswith("metric loss") and "(2,)" in diff[2]
    assert golden.differences(ref, {"metrics": {}, "leaves": []})[0] == "metric loss is missing"


@pytest.mark.slow  # two fresh processes importing jaxmarl and compiling: 20-35 s
def test_scaling_runs_each_device_count_on_its_own_mesh(tmp_path, monkeypatch, capfd):
    import jax

    # the children compile into the session's cache (their programs recur between runs)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", jax.config.jax_compilation_cache_dir)
    argv = ["--devices", "2", "1", "--envs-per-device", "2", "--num-steps", "4",
            "--updates", "1", "--repeats", "1", "--json",
            "--out", str(tmp_path / "s.json"), "algo.num_minibatches=2"]  # fmt: skip
    out = _load("scaling").main(argv)
    assert json.loads(capfd.readouterr().out.strip().splitlines()[-1]) == out
    assert json.loads((tmp_path / "s.json").read_text()) == out
    one, two = out["rows"]
    assert [one["devices"], two["devices"]] == [1, 2]
    assert two["mesh"]["data_axis"] == 2 and two["mesh"]["platform"] == "cpu"
    assert [one["num_envs"], two["num_envs"]] == [2, 4]
    assert two["env_steps_per_chunk"] == 2 * one["env_steps_per_chunk"] == 2 * 2 * 4
    assert one["efficiency"] == 1.0
    assert two["efficiency"] == pytest.approx(two["env_steps_per_s"] / (2 * one["env_steps_per_s"]))
    assert one["mesh"]["data_axis"] == 1 and one["run_s"] > 0


def test_scaling_refuses_more_accelerators_than_the_host_has():
    scaling = _load("scaling")
    scaling.check_counts("gpu", 4, [1, 2, 4])
    with pytest.raises(SystemExit, match="--devices 8 16: this host has 4 gpu"):
        scaling.check_counts("gpu", 4, [1, 8, 16])
    flags = scaling.child_env(4)["XLA_FLAGS"].split()
    assert flags.count("--xla_force_host_platform_device_count=4") == 1


@pytest.mark.slow  # a benchmark-script run
def test_top_p_sampling_compares_bisection_with_the_sort(capfd):
    out = _load("top_p_sampling").main(["--vocab", "1000", "--batch", "3", "--json"])
    assert json.loads(capfd.readouterr().out.strip().splitlines()[-1]) == out
    assert out["same_tokens_kept"] and out["bisection_ms"] > 0 and out["sort_ms"] > 0
    assert len(out["kept_per_row"]) == 3 and all(1 <= k < 1000 for k in out["kept_per_row"])
