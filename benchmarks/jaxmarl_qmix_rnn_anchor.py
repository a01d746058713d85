"""The speed anchor for recurrent QMIX: JaxMARL's own ``baselines/QLearning/qmix_rnn.py``.

Imports ``make_train`` from a JaxMARL checkout (``--jaxmarl PATH``) and runs it at its
``ql_rnn_smax`` settings on SMAX 3m with hidden 64, mixer 32/64, 4 gradient steps per
update (``NUM_EPOCHS``), one-step targets (its only kind), no in-training tests and
``LEARNING_STARTS`` 0. Its trajectory buffer learns once it holds ``BUFFER_BATCH_SIZE``
(32) rollouts, i.e. from update 32, so the timed quantity is the difference between a
run of ``--base-updates`` (40) and one of ``--base-updates + --updates`` (60) updates:
the post-compile time of ``--updates`` training updates. It pairs with

    python benchmarks/train_throughput.py --algo qmix --env smax:3m --num-envs 16 \
        --updates 60 --minus-updates 40 --repeats 3 --json algo.hidden_dim=64 \
        algo.mixer_embed_dim=32 algo.mixer_hypernet_dim=64 algo.updates_per_rollout=4 \
        algo.lr=5e-5 algo.td_lambda=null algo.double_q=false
    python benchmarks/jaxmarl_qmix_rnn_anchor.py --jaxmarl /path/to/JaxMARL --repeats 3 --json

With more envs, ``--num-envs E --buffer-size B`` pairs with ours at the same ``--num-envs``
and ``algo.buffer_size=B``; the baseline's buffer keeps ``B // E`` rollouts of every env and
samples 32 of them, so ``B`` is at least ``32 E`` and it still learns from update 32.

Like the baseline's ``single_run``, the train function is ``jit(vmap(train))`` over one
seed. Only ``wandb`` and ``hydra`` are stubbed (imports the computation does not use;
``WANDB_MODE`` is disabled, so no callback is traced). Checked against JaxMARL commit
c793d095618c6d3edfb5632802348f57b70a4b94, whose ``jaxmarl/environments/smax`` and
``jaxmarl/wrappers`` are identical to the installed ``jaxmarl`` 0.2.0, so the installed
package serves the env; ``--use-checkout-jaxmarl`` imports the checkout's instead.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from jaxmarl_mappo_rnn_anchor import import_baseline

SETTINGS = {
    "NUM_ENVS": 16,
    "NUM_STEPS": 128,
    "BUFFER_SIZE": 5000,
    "BUFFER_BATCH_SIZE": 32,
    "HIDDEN_SIZE": 64,
    "MIXER_EMBEDDING_DIM": 32,
    "MIXER_HYPERNET_HIDDEN_DIM": 64,
    "MIXER_INIT_SCALE": 0.001,
    "EPS_START": 1.0,
    "EPS_FINISH": 0.05,
    "EPS_DECAY": 0.1,
    "MAX_GRAD_NORM": 10,
    "TARGET_UPDATE_INTERVAL": 10,
    "TAU": 1.0,
    "NUM_EPOCHS": 4,
    "LR": 0.00005,
    "LEARNING_STARTS": 0,
    "LR_LINEAR_DECAY": False,
    "GAMMA": 0.99,
    "REW_SCALE": 10.0,
    "ENV_NAME": "HeuristicEnemySMAX",
    "ENV_KWARGS": {"see_enemy_actions": True, "walls_cause_death": True, "attack_mode": "closest"},
    "TEST_DURING_TRAINING": False,
    "TEST_INTERVAL": 0.05,
    "TEST_NUM_STEPS": 128,
    "TEST_NUM_ENVS": 512,
    "NUM_SEEDS": 1,
    "SEED": 0,
    "WANDB_MODE": "disabled",
}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jaxmarl", type=Path, required=True, help="a JaxMARL checkout")
    p.add_argument("--map", default="3m")
    p.add_argument("--num-envs", type=int, default=SETTINGS["NUM_ENVS"])
    p.add_argument(
        "--buffer-size",
        type=int,
        default=SETTINGS["BUFFER_SIZE"],
        help="rollouts the buffer holds; at least 32 x --num-envs (its time axis is "
        "BUFFER_SIZE // NUM_ENVS rollouts and must hold the 32 of a sample)",
    )
    p.add_argument("--updates", type=int, default=20, help="the timed training updates")
    p.add_argument("--base-updates", type=int, default=40, help="the budget subtracted")
    p.add_argument("--repeats", type=int, default=1, help="timed runs of each; best kept")
    p.add_argument("--use-checkout-jaxmarl", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import jax

    baseline = import_baseline(args.jaxmarl, "QLearning", "qmix_rnn", args.use_checkout_jaxmarl)
    key = jax.random.split(jax.random.PRNGKey(SETTINGS["SEED"]), SETTINGS["NUM_SEEDS"])
    settings = dict(SETTINGS, NUM_ENVS=args.num_envs, BUFFER_SIZE=args.buffer_size)
    if settings["BUFFER_SIZE"] // settings["NUM_ENVS"] < settings["BUFFER_BATCH_SIZE"]:
        raise SystemExit(
            f"--buffer-size {args.buffer_size} holds {args.buffer_size // args.num_envs} "
            f"rollouts per env; the baseline needs {settings['BUFFER_BATCH_SIZE']}: "
            f"use at least {settings['BUFFER_BATCH_SIZE'] * args.num_envs}"
        )
    per_update = settings["NUM_STEPS"] * settings["NUM_ENVS"]

    def timed(updates):
        config = dict(settings, MAP_NAME=args.map)
        config["ENV_KWARGS"] = dict(settings["ENV_KWARGS"])
        config["TOTAL_TIMESTEPS"] = updates * per_update
        env, _ = baseline.env_from_config(config)
        train = jax.jit(jax.vmap(baseline.make_train(config, env)))
        t0 = time.perf_counter()
        compiled = train.lower(key).compile()
        compile_s = time.perf_counter() - t0
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            out = jax.block_until_ready(compiled(key))
            best = min(best, time.perf_counter() - t0)
        grad_steps = int(out["runner_state"][0].grad_steps[0])
        return best, compile_s, grad_steps

    base_s, base_compile_s, base_grad = timed(args.base_updates)
    run_s, compile_s, grad = timed(args.base_updates + args.updates)
    diff = run_s - base_s
    out = {
        "algo": "jaxmarl_qmix_rnn_anchor",
        "env": f"smax:{args.map}",
        "num_envs": settings["NUM_ENVS"],
        "buffer_size": settings["BUFFER_SIZE"],
        "updates": args.updates,
        "base_updates": args.base_updates,
        "grad_steps_timed": grad - base_grad,
        "diff_s": diff,
        "env_steps_per_s": args.updates * per_update / diff,
        "run_s": run_s,
        "base_run_s": base_s,
        "compile_s": compile_s,
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
    }
    print(json.dumps(out) if args.json else out)
    return out


if __name__ == "__main__":
    main()
