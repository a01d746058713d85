"""Learners on 4 (forced CPU) devices: the numbers of 4 virtual data shards, the learning
statistics of one device, and run.py runs on a mesh, resumed on another. One subprocess
(``mesh_equivalence_script.py``) computes everything: the device count is fixed when
jax starts. Both forms run with the slow tests (``-m slow``): the whole check compiles a
dozen programs (minutes on a 2-core CPU), its quick form (IPPO on 4 devices against one,
run.py on 4 devices) about a minute of CPU, and the default suite keeps one shard on one
device (``test_mesh.py``). Each is one test: xdist would run a module fixture on each
worker."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from xla_flags import with_product_floats

SCRIPT = Path(__file__).with_name("mesh_equivalence_script.py")
ROOT = SCRIPT.parents[2]
ALGOS = ("ippo", "mappo", "qmix")


def run_script(scratch: Path, quick: bool = False) -> dict:
    flags = os.environ.get("XLA_FLAGS", "")
    if not quick:
        # the full check bounds how far QMIX's 4-device parameters drift from 4 virtual
        # shards' over 6 updates (float reduction order, amplified by Adam); it is set for
        # the product's compiler, not the suite's faster loop emitters (tests/conftest.py)
        flags = with_product_floats(flags)
    env = {
        **os.environ,
        "JAXMARL_MESH_QUICK": "1" if quick else "0",
        "XLA_FLAGS": f"{flags} --xla_force_host_platform_device_count=4".strip(),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [sys.executable, str(SCRIPT), str(scratch)]
    cache = jax.config.jax_compilation_cache_dir
    if cache:
        argv.append(cache)
    proc = subprocess.run(argv, env=env, cwd=scratch, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == 4
    return out


def metrics(result, algo, mode) -> dict[str, np.ndarray]:
    """``{name: [seeds, updates]}`` of ``algo`` trained on ``mode`` (``devices``: 4 CPU
    devices, ``virtual``: 4 virtual shards on one, ``one``: one device, the same envs)."""
    m = result["compare"][algo]["metrics"][mode]
    return {k: np.asarray(v, np.float64) for k, v in m.items()}


def check_four_devices_compute_what_four_virtual_shards_do(result, algo):
    """The first update's metrics and parameters agree to float precision; the next ones
    may drift apart by the order of the cross-device float reductions."""
    assert result["compare"][algo]["data_axis"] == 4
    devices, virtual = metrics(result, algo, "devices"), metrics(result, algo, "virtual")
    assert set(devices) == set(virtual)
    for name in devices:
        np.testing.assert_allclose(
            devices[name][:, 0], virtual[name][:, 0], rtol=1e-5, atol=1e-7, err_msg=name
        )
        np.testing.assert_allclose(devices[name], virtual[name], rtol=2e-3, atol=1e-5, err_msg=name)
    params = result["compare"][algo]["params_rel_diff"]
    # QMIX's Adam steps on the hypernetworks' near-zero gradients scale the reduction
    # order's differences up to ~3e-5 of a leaf's largest parameter
    assert params[0] < (1e-4 if algo == "qmix" else 1e-5), params
    assert max(params) < 1e-3, params


# Which learning statistics 4 devices must share with one: the per-seed means over the
# first updates of the episode return (the learning curve), the loss or value loss, and
# the gradient norm. Over a few updates the curve has not moved much, so the test is
# whether the sharded learner's statistics come from the same distribution as one
# device's: its envs, minibatches and replay samples are drawn per shard, so no single
# number matches. The gradient norm is the statistic a wrong reduction moves (a sum
# over shards instead of a mean quadruples it; a shard's own gradient is noisier), the
# return and losses what a shard stepping with other shards' envs or stale statistics
# would. The tolerance is 4 standard errors of the difference of the two means over
# seeds.
STATISTICS = {
    "ippo": ("episode_return", "value_loss", "grad_norm"),
    "mappo": ("episode_return", "value_loss", "grad_norm"),
    "qmix": ("episode_return", "loss", "q_mean", "grad_norm"),
}


def check_four_devices_learn_as_one_device_does(result, algo):
    devices, one = metrics(result, algo, "devices"), metrics(result, algo, "one")
    for name in STATISTICS[algo]:
        a, b = np.nanmean(devices[name], 1), np.nanmean(one[name], 1)  # per seed
        assert np.isfinite(a).all() and np.isfinite(b).all(), name
        se = np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
        assert se > 0, name
        assert abs(a.mean() - b.mean()) <= 4 * se, (name, a.mean(), b.mean(), se)
    # the same seeds draw other envs on 4 shards: not the one device's numbers
    assert result["compare"][algo]["params_differ_from_one_device"] > 1e-3


def check_run_py_records_the_mesh(result):
    run = result["runs"]["ippo_4"]
    assert run["code"] == 0, run["stderr"]
    for described in (run["summary"]["mesh"], run["mesh_json"]):
        assert described["devices"] == 4 and described["data_axis"] == 4
        assert described["seeds_axis"] == 1 and described["platform"] == "cpu"
    assert run["metric_rows"] == 16


def check_a_ppo_run_resumes_on_another_device_count(result):
    """PPO keeps no state per shard: trained on 4 devices, extended on 2."""
    run = result["runs"]["ippo_resumed_on_2"]
    assert run["code"] == 0, run["stderr"]
    assert run["summary"]["mesh"]["devices"] == 2 and run["mesh_json"]["data_axis"] == 2
    assert run["summary"]["env_steps"] == 6144
    assert run["metric_rows"] == 24
    assert np.isfinite(run["summary"]["final_return_mean"])


def check_a_replay_buffer_run_refuses_another_device_count(result):
    assert result["runs"]["qmix_4"]["code"] == 0
    refused = result["runs"]["qmix_resumed_on_2"]
    assert refused["code"] == 2
    assert "config error: resume:" in refused["stderr"]
    assert "replay buffer" in refused["stderr"]
    assert "split over 4 devices" in refused["stderr"] and "(now 2)" in refused["stderr"]
    # refused before anything was written
    assert result["runs"]["qmix_checkpoints"] == [4, 8]


@pytest.mark.slow
def test_learners_on_four_cpu_devices(tmp_path):
    result = run_script(tmp_path)
    for algo in ALGOS:
        check_four_devices_compute_what_four_virtual_shards_do(result, algo)
        check_four_devices_learn_as_one_device_does(result, algo)
    check_run_py_records_the_mesh(result)
    check_a_ppo_run_resumes_on_another_device_count(result)
    check_a_replay_buffer_run_refuses_another_device_count(result)


@pytest.mark.slow
def test_learners_on_four_cpu_devices_quick(tmp_path):
    result = run_script(tmp_path, quick=True)
    check_four_devices_learn_as_one_device_does(result, "ippo")
    check_run_py_records_the_mesh(result)
