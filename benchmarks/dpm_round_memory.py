"""Peak memory of keeping DPM's labels over its feedback rounds (whole-episode segments).

    python benchmarks/dpm_round_memory.py [--labels 30] [--json]
    git show REV:jaxmarl_llm/methods/dpm/online.py > /tmp/online_rev.py
    python benchmarks/dpm_round_memory.py --module /tmp/online_rev.py   # another code's

Ten rounds of random trajectory labels on SMAX 8m (trajectory-only DPM: ``--labels``
pairs a round, each segment of 8 agents x 602 features per step, the rounds' longest
episodes growing from 48 to 101 steps as a learning team's do) go through
``DPMFeedback._datasets``, the step that holds every round's labels for the refit; no
fit runs. Prints the process's resident memory after each round and its peak (VmHWM)
above the start. At ``--labels 150``, ``dpm_figures.py dual``'s setting, the datasets
reach 5.8 GB; ``--labels 30`` keeps the measurement at a fifth of that.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LENGTHS = (48, 48, 64, 64, 80, 80, 96, 96, 101, 101)


def memory_gb() -> dict[str, float]:
    status = Path("/proc/self/status").read_text().splitlines()
    kb = {k: float(v.split()[0]) for k, v in (line.split(":") for line in status if ":" in line)
          if k in ("VmRSS", "VmHWM")}  # fmt: skip
    return {"rss": kb["VmRSS"] / 2**20, "peak": kb["VmHWM"] / 2**20}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--labels", type=int, default=30, help="trajectory pairs per round")
    p.add_argument("--module", default=None, help="an online.py to measure instead of ours")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)

    import jax
    import numpy as np

    import envs  # noqa: F401  (before a module from a file imports envs.array_env)
    from jaxmarl_llm.methods.dpm import DPMConfig, reward_model
    from jaxmarl_llm.preferences import SegmentPairDataset

    if args.module:
        spec = importlib.util.spec_from_file_location("dpm_online_measured", args.module)
        online = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(online)
    else:
        from jaxmarl_llm.methods.dpm import online
    aenv = envs.make_array_env("smax:8m")
    cfg = DPMConfig(rounds=len(LENGTHS), labels_per_round=args.labels, preferences="trajectory",
                    segments="episode", segment_length=101)  # fmt: skip
    fb = online.DPMFeedback(aenv, cfg, reward_model(aenv, cfg), seed=0, artifact_dir=None)
    rng = np.random.default_rng(0)
    start = memory_gb()["rss"]
    rounds = []
    for k, t in enumerate(LENGTHS):
        shape = (1, args.labels, t, aenv.num_agents, 2 * aenv.world_state_dim + aenv.obs_dim
                 + aenv.num_actions)  # fmt: skip
        feats = lambda shape=shape: rng.standard_normal(shape, np.float32)
        mask = np.ones(shape[:4], bool)
        ones = np.ones((1, args.labels), np.float32)
        new = {"trajectory": SegmentPairDataset(feats(), feats(), mask, mask, ones, ones,
                                                ones.astype(bool))}  # fmt: skip
        new = jax.tree.map(jax.numpy.asarray, new)
        if hasattr(fb, "_rounds_before"):  # the code that kept each round apart
            data = fb._datasets([*fb._rounds_before(k, new), new])
            fb._new[k] = new
        else:
            data = fb._datasets(k, new)
        jax.block_until_ready(data)
        del data, new
        now = memory_gb()
        rounds.append({"round": k, "steps": t, "rss_gb": now["rss"], "peak_gb": now["peak"]})
        print(rounds[-1], flush=True)
    result = {"bench": "dpm_round_memory", "labels": args.labels, "module": args.module or "ours",
              "start_gb": start, "peak_above_start_gb": memory_gb()["peak"] - start,
              "rounds": rounds, "jax": jax.__version__}  # fmt: skip
    print(f"peak above the start: {result['peak_above_start_gb']:.2f} GB")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
