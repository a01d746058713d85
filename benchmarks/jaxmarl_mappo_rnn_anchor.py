"""The speed anchor for recurrent MAPPO: JaxMARL's own ``baselines/MAPPO/mappo_rnn_smax.py``.

Imports ``make_train`` from a JaxMARL checkout (``--jaxmarl PATH``) and runs it at its
``mappo_homogenous_rnn_smax`` settings (128 envs x 128 steps, FC and GRU 128, relu, lr 2e-3,
4 epochs x 4 minibatches, clip 0.2, max grad norm 0.25, ent 0, agent ids in the world
state) on SMAX 3m, so it pairs with

    python benchmarks/train_throughput.py --algo mappo --env smax:3m --num-envs 128 \
        --updates 5 --repeats 3 --json algo.recurrent=true algo.gru_hidden_dim=128 \
        algo.activation=relu algo.lr=2e-3 algo.ent_coef=0.0 algo.max_grad_norm=0.25
    python benchmarks/jaxmarl_mappo_rnn_anchor.py --jaxmarl /path/to/JaxMARL \
        --updates 5 --repeats 3 --json

Only the imports that the computation does not use are stubbed: ``wandb`` (its
per-update ``io_callback`` still runs and calls a no-op ``wandb.log``) and ``hydra``
(the ``@hydra.main`` decorator). Checked against JaxMARL commit
c793d095618c6d3edfb5632802348f57b70a4b94, whose ``jaxmarl/environments/smax`` and
``jaxmarl/wrappers`` are identical to the installed ``jaxmarl`` 0.2.0, so the installed
package serves the env; ``--use-checkout-jaxmarl`` imports the checkout's instead.
Reports post-compile env steps/s of the whole jitted train loop, best of ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

SETTINGS = {
    "LR": 0.002,
    "NUM_ENVS": 128,
    "NUM_STEPS": 128,
    "FC_DIM_SIZE": 128,
    "GRU_HIDDEN_DIM": 128,
    "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4,
    "GAMMA": 0.99,
    "GAE_LAMBDA": 0.95,
    "CLIP_EPS": 0.2,
    "SCALE_CLIP_EPS": False,
    "ENT_COEF": 0.0,
    "VF_COEF": 0.5,
    "MAX_GRAD_NORM": 0.25,
    "ACTIVATION": "relu",
    "OBS_WITH_AGENT_ID": True,
    "ENV_NAME": "HeuristicEnemySMAX",
    "ENV_KWARGS": {"see_enemy_actions": True, "walls_cause_death": True, "attack_mode": "closest"},
    "ANNEAL_LR": True,
    "SEED": 0,
    "WANDB_MODE": "disabled",
}


def stub_logging_modules() -> None:
    """``wandb`` and ``hydra`` as the few no-op names the baselines touch at import and
    in their callbacks."""
    wandb = types.ModuleType("wandb")
    wandb.log = lambda *a, **k: None
    wandb.init = lambda *a, **k: None
    hydra = types.ModuleType("hydra")
    hydra.main = lambda *a, **k: lambda f: f
    sys.modules.setdefault("wandb", wandb)
    sys.modules.setdefault("hydra", hydra)


def import_baseline(jaxmarl: Path, subdir: str, module: str, use_checkout_jaxmarl: bool):
    """``module`` from ``jaxmarl/baselines/subdir`` of a JaxMARL checkout."""
    stub_logging_modules()
    if use_checkout_jaxmarl:
        sys.path.insert(0, str(jaxmarl))
    sys.path.insert(0, str(jaxmarl / "baselines" / subdir))
    import importlib

    return importlib.import_module(module)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jaxmarl", type=Path, required=True, help="a JaxMARL checkout")
    p.add_argument("--map", default="3m")
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--updates", type=int, default=5)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--use-checkout-jaxmarl", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import jax

    baseline = import_baseline(args.jaxmarl, "MAPPO", "mappo_rnn_smax", args.use_checkout_jaxmarl)
    config = dict(SETTINGS, MAP_NAME=args.map, NUM_ENVS=args.num_envs)
    config["TOTAL_TIMESTEPS"] = args.updates * config["NUM_STEPS"] * args.num_envs
    train = jax.jit(baseline.make_train(config))
    key = jax.random.PRNGKey(config["SEED"])
    t0 = time.perf_counter()
    compiled = train.lower(key).compile()
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(key))
        best = min(best, time.perf_counter() - t0)
    env_steps = config["NUM_UPDATES"] * config["NUM_STEPS"] * args.num_envs
    out = {
        "algo": "jaxmarl_mappo_rnn_anchor",
        "env": f"smax:{args.map}",
        "num_envs": args.num_envs,
        "updates": int(config["NUM_UPDATES"]),
        "env_steps": int(env_steps),
        "env_steps_per_s": env_steps / best,
        "compile_s": compile_s,
        "run_s": best,
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
    }
    print(json.dumps(out) if args.json else out)
    return out


if __name__ == "__main__":
    main()
