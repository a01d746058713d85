"""The speed anchor: JaxMARL's IPPO-FF baseline on MPE simple spread, reimplemented.

jaxmarl's pip package ships no learners, so this script rebuilds the computation of
JaxMARL's ``baselines/IPPO/ippo_ff_mpe.py`` step for step: jaxmarl's ``MPE_simple_spread_v3``
behind its ``MPELogWrapper``, dict observations stacked to ``[N * E, D]`` per step, one
shared 64-64 tanh actor-critic without agent ids, distrax sampling, GAE as a reverse scan,
``jax.random.permutation`` minibatches over all (step, actor) samples, and the same
hyperparameters as ``benchmarks/train_throughput.py``. It reports post-compile env
steps/s the same way, so the two run side by side:

    python benchmarks/jaxmarl_ippo_anchor.py --num-envs 1024 --updates 3 --repeats 3 --json
"""

from __future__ import annotations

import argparse
import json
import time

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal

HP = dict(
    lr=2.5e-4, num_steps=128, update_epochs=4, num_minibatches=4, gamma=0.99,
    gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
)  # fmt: skip


class AnchorActorCritic(nn.Module):
    num_actions: int

    @nn.compact
    def __call__(self, x):
        def tower(out, scale):
            h = x
            for _ in range(2):
                h = nn.tanh(
                    nn.Dense(64, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0))(h)
                )
            return nn.Dense(out, kernel_init=orthogonal(scale), bias_init=constant(0.0))(h)

        return distrax.Categorical(logits=tower(self.num_actions, 0.01)), tower(1, 1.0)[:, 0]


def make_anchor_train(num_envs: int, num_updates: int):
    import jaxmarl
    from jaxmarl.wrappers.baselines import MPELogWrapper

    env = MPELogWrapper(jaxmarl.make("MPE_simple_spread_v3"))
    agents, n = env.agents, env.num_agents
    actors = n * num_envs
    T, mb = HP["num_steps"], HP["num_steps"] * n * num_envs // HP["num_minibatches"]
    net = AnchorActorCritic(env.action_space(agents[0]).n)
    frac = lambda c: 1.0 - (c // (HP["num_minibatches"] * HP["update_epochs"])) / num_updates
    tx = optax.chain(
        optax.clip_by_global_norm(HP["max_grad_norm"]),
        optax.adam(lambda c: HP["lr"] * frac(c), eps=1e-5),
    )
    stack = lambda d: jnp.stack([d[a] for a in agents]).reshape(actors, -1)

    def train(rng):
        rng, r_init, r_reset = jax.random.split(rng, 3)
        params = net.init(r_init, jnp.zeros((1, env.observation_space(agents[0]).shape[0])))
        opt_state = tx.init(params)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(r_reset, num_envs))

        def update(carry, _):
            params, opt_state, env_state, obs, rng = carry

            def env_step(c, _):
                env_state, obs, rng = c
                rng, r_act, r_step = jax.random.split(rng, 3)
                x = stack(obs)
                pi, value = net.apply(params, x)
                action = pi.sample(seed=r_act)
                log_prob = pi.log_prob(action)
                acts = {a: action.reshape(n, num_envs)[i] for i, a in enumerate(agents)}
                obs, env_state, reward, done, info = jax.vmap(env.step)(
                    jax.random.split(r_step, num_envs), env_state, acts
                )
                info = jax.tree.map(lambda v: v.reshape(actors), info)
                tr = (stack(done).squeeze(), action, value, stack(reward).squeeze(), log_prob, x)
                return (env_state, obs, rng), (tr, info)

            (env_state, obs, rng), (traj, info) = jax.lax.scan(
                env_step, (env_state, obs, rng), None, T
            )
            done, action, value, reward, log_prob, x = traj
            _, last_value = net.apply(params, stack(obs))

            def gae_step(c, t):
                gae, next_value = c
                d, v, r = t
                delta = r + HP["gamma"] * next_value * (1 - d) - v
                gae = delta + HP["gamma"] * HP["gae_lambda"] * (1 - d) * gae
                return (gae, v), gae

            _, adv = jax.lax.scan(
                gae_step, (jnp.zeros_like(last_value), last_value), (done, value, reward),
                reverse=True, unroll=8,
            )  # fmt: skip
            targets = adv + value

            def loss_fn(p, b):
                x, action, old_v, old_lp, gae, tgt = b
                pi, v = net.apply(p, x)
                lp = pi.log_prob(action)
                v_clip = old_v + (v - old_v).clip(-HP["clip_eps"], HP["clip_eps"])
                v_loss = 0.5 * jnp.maximum(jnp.square(v - tgt), jnp.square(v_clip - tgt)).mean()
                ratio = jnp.exp(lp - old_lp)
                gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                clipped = jnp.clip(ratio, 1.0 - HP["clip_eps"], 1.0 + HP["clip_eps"]) * gae
                pg = -jnp.minimum(ratio * gae, clipped).mean()
                return pg + HP["vf_coef"] * v_loss - HP["ent_coef"] * pi.entropy().mean()

            def sgd(c, b):
                p, o = c
                grads = jax.grad(loss_fn)(p, b)
                upd, o = tx.update(grads, o, p)
                return (optax.apply_updates(p, upd), o), None

            def epoch(c, _):
                p, o, rng = c
                rng, r = jax.random.split(rng)
                perm = jax.random.permutation(r, T * actors)
                batch = (x, action, value, log_prob, adv, targets)
                batch = jax.tree.map(lambda a: a.reshape(T * actors, *a.shape[2:]), batch)
                batch = jax.tree.map(
                    lambda a: jnp.take(a, perm, axis=0).reshape(-1, mb, *a.shape[1:]), batch
                )
                (p, o), _ = jax.lax.scan(sgd, (p, o), batch)
                return (p, o, rng), None

            (params, opt_state, rng), _ = jax.lax.scan(
                epoch, (params, opt_state, rng), None, HP["update_epochs"]
            )
            metric = jax.tree.map(jnp.mean, info)
            return (params, opt_state, env_state, obs, rng), metric

        _, metrics = jax.lax.scan(
            update, (params, opt_state, env_state, obs, rng), None, num_updates
        )
        return metrics

    return train


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--updates", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    train = jax.jit(make_anchor_train(args.num_envs, args.updates))
    key = jax.random.PRNGKey(0)
    t0 = time.perf_counter()
    compiled = train.lower(key).compile()
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        metrics = jax.block_until_ready(compiled(key))
        best = min(best, time.perf_counter() - t0)
    env_steps = args.updates * HP["num_steps"] * args.num_envs
    # MPELogWrapper already scales the shared reward by the number of agents.
    ret = np.asarray(metrics["returned_episode_returns"])[-1]
    out = {
        "algo": "jaxmarl_ippo_ff_anchor",
        "env": "MPE_simple_spread_v3",
        "num_envs": args.num_envs,
        "updates": args.updates,
        "env_steps": env_steps,
        "env_steps_per_s": env_steps / best,
        "compile_s": compile_s,
        "run_s": best,
        "final_return": float(ret),
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
    }
    print(json.dumps(out) if args.json else out)
    return out


if __name__ == "__main__":
    main()
