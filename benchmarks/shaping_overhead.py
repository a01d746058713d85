"""Cost of a reward model inside the training scan: steps/s with and without shaping.

    python benchmarks/shaping_overhead.py --env two_switch --shaper lca --num-envs 256

Runs ``train_throughput.py`` twice with the same config, identity shaping and then
``--shaper`` (for ``lca`` the potential is fitted first, outside the timing), and reports
the throughput lost to computing shaped rewards in the scan.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> dict:
    from jaxmarl_llm.learners.registry import algo_names

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", default="two_switch")
    p.add_argument("--algo", default="ippo", choices=algo_names())
    p.add_argument("--shaper", default="lca")
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--updates", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--shaped-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override for the shaped run only (e.g. shaping.kwargs.pessimism=1); repeatable",
    )
    p.add_argument("overrides", nargs="*", help="extra config overrides, key=value")
    args = p.parse_args(argv)
    from train_throughput import main as throughput

    common = [
        "--algo", args.algo, "--env", args.env, "--num-envs", str(args.num_envs),
        "--updates", str(args.updates), "--repeats", str(args.repeats), "--json",
    ]  # fmt: skip
    base = throughput([*common, *args.overrides])
    shaped = throughput(
        [*common, f"shaping.name={args.shaper}", *args.overrides, *args.shaped_override]
    )
    out = {
        "env": args.env,
        "algo": args.algo,
        "shaper": args.shaper,
        "shaped_overrides": args.shaped_override,
        "num_envs": args.num_envs,
        "identity_steps_per_s": base["env_steps_per_s"],
        "shaped_steps_per_s": shaped["env_steps_per_s"],
        "overhead_fraction": 1.0 - shaped["env_steps_per_s"] / base["env_steps_per_s"],
        "device": base["device"],
    }
    print(json.dumps(out) if args.json else "\n".join(f"{k:>22}: {v}" for k, v in out.items()))
    return out


if __name__ == "__main__":
    main()
