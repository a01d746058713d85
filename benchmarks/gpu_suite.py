"""Run the throughput benchmarks one after another under one wall-clock budget.

Made for a short lease of an accelerator: each benchmark runs in its own process with
its own time limit (a hang or a crash costs that item only), items are run in the
order given, and an item is skipped when less time is left than its limit. Every JSON
line the benchmarks print is appended to ``--out`` as it arrives, so what finished is
kept even if the whole command is killed.

    python benchmarks/gpu_suite.py --budget 480 --out results.jsonl
    python benchmarks/gpu_suite.py --scale 0.01 --budget 300   # a quick CPU dry run

``--scale`` multiplies every ``--num-envs`` (at least 8), to check the suite on a
small machine before spending accelerator time on it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# fmt: off
# the settings of JaxMARL's mappo_homogenous_rnn_smax and ql_rnn_smax (hidden 64, mixer
# 32/64, 4 gradient steps per update, one-step targets) that the anchor scripts run
MAPPO_RNN = ["algo.recurrent=true", "algo.gru_hidden_dim=128", "algo.activation=relu",
             "algo.lr=2e-3", "algo.ent_coef=0.0", "algo.max_grad_norm=0.25"]
QMIX_RNN = ["algo.hidden_dim=64", "algo.mixer_embed_dim=32", "algo.mixer_hypernet_dim=64",
            "algo.updates_per_rollout=4", "algo.lr=5e-5", "algo.td_lambda=null",
            "algo.double_q=false"]
# the paper's Table 1 MAPPO on football and V-GEPF's shaper
# on top of it (the default football CLIP's potential on every state)
TABLE1_MAPPO = ["--algo", "mappo", "--env", "football:academy_counterattack_easy",
                "--num-envs", "2048", "--num-steps", "400", "--updates", "1", "--seeds", "2",
                "--repeats", "2", "algo.update_epochs=10", "algo.num_minibatches=4",
                "algo.lr=5e-4", "algo.gamma=0.995", "algo.gae_lambda=0.95", "algo.clip_eps=0.2",
                "algo.ent_coef=0.01", "algo.max_grad_norm=10.0", "algo.activation=relu",
                "algo.hidden_sizes=[256,128,64]", "algo.anneal_lr=false"]
VGEPF = ["shaping.name=vgepf", "shaping.coef=0.5", "shaping.kwargs.selection.selector=none",
         "shaping.kwargs.gamma=0.995"]

# (name, script, arguments, time limit in seconds); num_envs are the accelerator sizes.
# PPO items take algo.grad_chunk_rows' default, which is no chunking on an accelerator.
SUITE: list[tuple[str, str, list[str], int]] = [
    ("ippo_spread3_65536", "train_throughput.py",
     ["--algo", "ippo", "--env", "mpe:simple_spread_3", "--num-envs", "65536",
      "--updates", "3", "--repeats", "2"], 150),
    ("anchor_ippo_spread3_65536", "jaxmarl_ippo_anchor.py",
     ["--num-envs", "65536", "--updates", "3", "--repeats", "2"], 150),
    # DPM's target (>= 75% of plain QMIX) at few, some and many envs
    ("dpm_overhead_qmix_smax3m_8", "shaping_overhead.py",
     ["--env", "smax:3m", "--algo", "qmix", "--shaper", "dpm", "--num-envs", "8",
      "--updates", "20", "--repeats", "2", "env.kwargs.reward=strong_sparse",
      "algo.learning_starts=1024", "algo.buffer_size=5000"], 180),
    ("dpm_overhead_qmix_smax3m_512", "shaping_overhead.py",
     ["--env", "smax:3m", "--algo", "qmix", "--shaper", "dpm", "--num-envs", "512",
      "--updates", "10", "--repeats", "2", "env.kwargs.reward=strong_sparse",
      "algo.learning_starts=1024", "algo.buffer_size=2000"], 180),
    ("dpm_overhead_qmix_smax3m_4096", "shaping_overhead.py",
     ["--env", "smax:3m", "--algo", "qmix", "--shaper", "dpm", "--num-envs", "4096",
      "--updates", "20", "--repeats", "2", "env.kwargs.reward=strong_sparse",
      "algo.learning_starts=1024", "algo.buffer_size=5000"], 180),
    ("yolo_overhead_mappo_lbf_8192", "shaping_overhead.py",
     ["--env", "lbf:8x8-2p-2f-coop", "--algo", "mappo", "--shaper", "yolo",
      "--num-envs", "8192", "--updates", "3", "--repeats", "2"], 180),
    ("mappo_smax3m_8192", "train_throughput.py",
     ["--algo", "mappo", "--env", "smax:3m", "--num-envs", "8192",
      "--updates", "3", "--repeats", "2"], 150),
    ("env_step_65536", "env_throughput.py",
     ["--envs", "mpe:simple_spread_3", "smax:3m", "lbf:8x8-2p-2f-coop",
      "--num-envs", "65536", "--steps", "200", "--repeats", "2"], 120),
    # QMIX alone with every env filling the buffer each update (buffer >= num_envs)
    ("qmix_smax3m_65536", "train_throughput.py",
     ["--algo", "qmix", "--env", "smax:3m", "--num-envs", "65536",
      "--updates", "3", "--repeats", "2", "algo.buffer_size=65536"], 150),
    # JaxMARL's own recurrent baselines beside ours at accelerator sizes (items named
    # anchor_*_rnn_* need --jaxmarl); the settings are those of the CPU pairs
    ("mappo_rnn_smax3m_8192", "train_throughput.py",
     ["--algo", "mappo", "--env", "smax:3m", "--num-envs", "8192", "--updates", "3",
      "--repeats", "2", *MAPPO_RNN], 150),
    ("anchor_mappo_rnn_smax3m_8192", "jaxmarl_mappo_rnn_anchor.py",
     ["--num-envs", "8192", "--updates", "3", "--repeats", "2"], 150),
    ("qmix_rnn_smax3m_4096", "train_throughput.py",
     ["--algo", "qmix", "--env", "smax:3m", "--num-envs", "4096", "--updates", "60",
      "--minus-updates", "40", *QMIX_RNN, "algo.buffer_size=131072"], 240),
    ("anchor_qmix_rnn_smax3m_4096", "jaxmarl_qmix_rnn_anchor.py",
     ["--num-envs", "4096", "--buffer-size", "131072"], 240),
    ("ippo_spread3_8192", "train_throughput.py",
     ["--algo", "ippo", "--env", "mpe:simple_spread_3", "--num-envs", "8192",
      "--updates", "3", "--repeats", "2"], 90),
    ("anchor_ippo_spread3_8192", "jaxmarl_ippo_anchor.py",
     ["--num-envs", "8192", "--updates", "3", "--repeats", "2"], 90),
    # the CPU's chunks on the accelerator: minibatch gradients over 8192-row chunks
    ("ippo_spread3_65536_chunked", "train_throughput.py",
     ["--algo", "ippo", "--env", "mpe:simple_spread_3", "--num-envs", "65536",
      "--updates", "3", "--repeats", "2", "algo.grad_chunk_rows=8192"], 150),
    # V-GEPF's target: >= 50% of MAPPO's env steps/s (2 seeds x 2,048 envs x 400 steps)
    ("mappo_football_counterattack_2x2048", "train_throughput.py",
     TABLE1_MAPPO, 300),
    ("vgepf_mappo_football_counterattack_2x2048", "train_throughput.py",
     [*TABLE1_MAPPO, *VGEPF], 300),
]
# fmt: on


# scripts that take the path of a JaxMARL checkout (--jaxmarl)
NEED_CHECKOUT = {"jaxmarl_mappo_rnn_anchor.py", "jaxmarl_qmix_rnn_anchor.py"}


def scaled(args: list[str], scale: float) -> list[str]:
    """``args`` with every ``--num-envs`` times ``scale`` (a multiple of 8, at least 8: it
    splits into minibatches) and every buffer size
    times ``scale`` (at least 32 rollouts of each scaled env, what a sample may take)."""
    out = list(args)
    if scale == 1.0 or "--num-envs" not in out:
        return out
    i = out.index("--num-envs") + 1
    out[i] = str(num_envs := max(8, int(int(out[i]) * scale) // 8 * 8))
    smaller = lambda size: str(max(int(int(size) * scale), 32 * num_envs))
    for j, arg in enumerate(out):
        if arg.startswith("algo.buffer_size="):
            out[j] = "algo.buffer_size=" + smaller(arg.split("=", 1)[1])
        elif j > 0 and out[j - 1] == "--buffer-size":
            out[j] = smaller(arg)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=float, default=480.0, help="seconds for the whole suite")
    p.add_argument("--out", type=Path, default=Path("gpu_suite.jsonl"))
    p.add_argument("--scale", type=float, default=1.0, help="multiplies every --num-envs")
    p.add_argument("--only", nargs="*", default=None, help="names of the items to run")
    p.add_argument(
        "--jaxmarl",
        type=Path,
        default=None,
        help="a JaxMARL checkout for the anchor_*_rnn_* items (skipped without it)",
    )
    args = p.parse_args(argv)

    start = time.monotonic()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for name, script, script_args, limit in SUITE:
        if args.only is not None and name not in args.only:
            continue
        left = args.budget - (time.monotonic() - start)
        if left < min(limit, 60):
            print(f"[suite] skip {name}: {left:.0f} s left", flush=True)
            continue
        cmd = [sys.executable, str(HERE / script), *scaled(script_args, args.scale), "--json"]
        if script in NEED_CHECKOUT:
            if args.jaxmarl is None:
                print(f"[suite] skip {name}: needs --jaxmarl (a JaxMARL checkout)", flush=True)
                continue
            cmd += ["--jaxmarl", str(args.jaxmarl)]
        print(f"[suite] {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=min(limit, left)
            )
            lines, rc, err = proc.stdout.splitlines(), proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            lines, rc, err = out.splitlines(), "timeout", ""
        wall = time.monotonic() - t0
        rows = []
        for line in lines:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        with args.out.open("a") as f:
            for row in rows:
                f.write(json.dumps({"item": name, "wall_s": round(wall, 1), **row}) + "\n")
            if not rows:
                f.write(
                    json.dumps(
                        {
                            "item": name,
                            "wall_s": round(wall, 1),
                            "rc": rc,
                            "stderr_tail": err[-1500:],
                        }
                    )
                    + "\n"
                )
        for row in rows:
            print(f"[suite] {name} ({wall:.0f} s): {json.dumps(row)}", flush=True)
        if not rows:
            print(f"[suite] {name} failed ({rc}, {wall:.0f} s):\n{err[-1500:]}", flush=True)
    print(f"[suite] done in {time.monotonic() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
