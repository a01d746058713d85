"""Runs over several processes: two local processes joined by ``jax.distributed`` train
one run on a 4-device mesh, process 0 alone writing the run folder; its sharded
checkpoint loads whole on one device and resumes in a single process. And which
environments make a process join others."""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from xla_flags import with_suite_flags

from jaxmarl_llm.config import load_config
from jaxmarl_llm.distributed import initialize_from_environment
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.runner import load_trained, run_experiment

ROOT = Path(__file__).resolve().parents[2]
# 4 updates of 64 env steps, in chunks of 2
TINY = [
    "algo.num_envs=8",
    "algo.num_steps=8",
    "algo.total_timesteps=256",
    "algo.num_minibatches=1",
    "algo.update_epochs=1",
    "algo.hidden_sizes=[16,16]",
    "num_seeds=2",
    "log_every=2",
    "progress=false",
    "plot=false",
]
TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_in_two_processes(out: Path, logs: Path) -> list[str]:
    """Train the tiny run into ``out`` with two processes of 2 CPU devices each; what
    each printed (their output goes to files in ``logs``: a pipe that fills up would
    stall one process, and the other with it, in a collective)."""
    port = free_port()
    flags = with_suite_flags("--xla_force_host_platform_device_count=2")
    cmd = [sys.executable, "experiments/run.py", "ippo_mpe_spread", *TINY, "mesh.seeds=2"]
    cmd.append(f"out_dir={out}")
    procs = []
    for i in range(2):
        env = {
            **os.environ,
            "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "JAX_NUM_PROCESSES": "2",
            "JAX_PROCESS_ID": str(i),
            "XLA_FLAGS": flags,
            "JAX_PLATFORMS": "cpu",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        cache = jax.config.jax_compilation_cache_dir
        if cache:  # the test session's compilation cache (tests/conftest.py)
            env["JAX_COMPILATION_CACHE_DIR"] = cache
        with (logs / f"{i}.out").open("w") as stdout, (logs / f"{i}.err").open("w") as stderr:
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=stdout, stderr=stderr))
    try:
        for p in procs:
            p.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pass
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, p in enumerate(procs):
        err = (logs / f"{i}.err").read_text()
        assert p.returncode == 0, f"process {i} exited {p.returncode}:\n{err[-6000:]}"
    return [(logs / f"{i}.out").read_text() for i in range(2)]


@pytest.mark.slow  # two processes compiling the run: over a minute of CPU
def test_two_processes_train_one_run(tmp_path):
    """One test, so that the run trains once whichever worker takes it."""
    out = tmp_path / "run"
    stdouts = train_in_two_processes(out, tmp_path)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mesh"]["processes"] == 2
    assert summary["mesh"]["devices"] == 4
    assert (summary["mesh"]["seeds_axis"], summary["mesh"]["data_axis"]) == (2, 2)
    assert summary["env_steps"] == 256
    # one process wrote the folder: one metrics.csv, one row per update, no stray files
    assert [p.name for p in tmp_path.rglob("metrics.csv")] == ["metrics.csv"]
    rows = (out / "metrics.csv").read_text().splitlines()
    assert [int(r.split(",")[0]) for r in rows[1:]] == [1, 2, 3, 4]
    assert not list(out.glob(".*"))
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["2", "4"]
    # and only it printed the summary
    assert "results in" in stdouts[0]
    assert "results in" not in stdouts[1] and "final_return_mean" not in stdouts[1]

    # the sharded checkpoint loads whole on this process's first device
    trained = load_trained(out)
    assert trained.updates == 4
    device = jax.local_devices()[0]
    for leaf in jax.tree.leaves(trained.state):
        assert leaf.sharding.device_set == {device}
    np.testing.assert_array_equal(np.asarray(trained.state.update_step), [4, 4])
    # the seeds trained on different processes' devices
    kernel = np.asarray(trained.state.params["params"]["actor"]["Dense_0"]["kernel"])
    assert np.all(np.isfinite(kernel))
    assert not np.allclose(kernel[0], kernel[1])

    # and resumes in one process (IPPO keeps no state per data shard), restored into the
    # state as this process's mesh places it; the run is done, so nothing trains
    result = run_experiment(load_config("ippo_mpe_spread", [*TINY, f"resume={out}"]))
    assert result.summary["mesh"]["processes"] == 1
    assert result.summary["env_steps"] == 256
    for a, b in zip(jax.tree.leaves(result.state), jax.tree.leaves(trained.state), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_PROCESS_ID": "0"}, "JAX_NUM_PROCESSES"),
        (
            {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "two", "JAX_PROCESS_ID": "0"},
            "JAX_NUM_PROCESSES='two'",
        ),
        (
            {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "-1"},
            "JAX_PROCESS_ID='-1'",
        ),
        (
            {"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2"},
            "from 0 to JAX_NUM_PROCESSES-1 = 1",
        ),
    ],
)
def test_bad_process_variables_are_named(environ, message, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("initialised with a bad environment")

    monkeypatch.setattr(jax.distributed, "initialize", never)
    with pytest.raises(ConfigError, match=re.escape(message)):
        initialize_from_environment(environ)


@pytest.mark.parametrize(
    ("environ", "joins"),
    [
        ({}, False),
        ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1", "SLURM_STEP_NODELIST": "n1"}, False),
        ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}, False),  # the batch script, no srun
        ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURM_STEP_NODELIST": "n[1-2]"}, True),
        ({"OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:5", "OMPI_COMM_WORLD_SIZE": "2"}, True),
        ({"OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:5", "OMPI_COMM_WORLD_SIZE": "1"}, False),
        ({"TPU_WORKER_HOSTNAMES": "t0"}, False),
        ({"TPU_WORKER_HOSTNAMES": "t0,t1"}, True),
    ],
)
def test_cluster_jobs_join_without_arguments(environ, joins, monkeypatch):
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *a, **k: calls.append((a, k)))
    assert initialize_from_environment(environ) is joins
    assert calls == ([((), {})] if joins else [])
