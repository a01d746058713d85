"""The RL stage of Verco's Algorithm 1 (and TWOSOME, and the untrained LM) on the salad
kitchen: the ``HostTrainer`` that the runner's host loop (``runner.host_loop``) drives.

Each iteration, per seed: a rollout (``rollout``) of ``num_envs`` kitchens for
``num_steps`` steps, then, unless the variant is ``lm_zero_shot``, a PPO update of the
action adapter (LoRA) and the value head over the rollout's decisions, in fixed-size
minibatches. Both agents share the adapter and the value head (their prompts differ).
With ``algo.lora_layers=last:K`` the update reads the trunk states the rollout kept.
"""

from __future__ import annotations

import functools
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from omegaconf import DictConfig, OmegaConf

from envs.capabilities import TextObservations, require
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.registry import algo_spec
from jaxmarl_llm.lm.lora import init_lora
from jaxmarl_llm.methods.verco.clock import COUNTS, TIME_SPLIT, Clock, hit_rate
from jaxmarl_llm.methods.verco.lm_policy import LMPolicy
from jaxmarl_llm.methods.verco.message_sources import MESSAGE_SOURCES, MessageSource
from jaxmarl_llm.methods.verco.models import PolicyModel, load_policy_model
from jaxmarl_llm.methods.verco.ppo_update import apply_updates, optimizer, ppo_grad, ppo_grad_top
from jaxmarl_llm.methods.verco.rollout import Decisions, Rollout, env_functions, seed_key
from jaxmarl_llm.methods.verco.trunk import pack_entries


class TrainState(dict):
    """Per seed: ``lora``, ``value`` (head params), ``opt`` (optimiser state), ``env``
    (the kitchens' states), ``episode_return`` and ``episode_length`` ``[E]`` so far."""


class Trainer:
    """One run's seeds: init, one iteration (rollout, update) per seed, metrics, and
    the checkpoint tree and summary fields of the runner's ``HostTrainer``."""

    def __init__(self, cfg: DictConfig, env, model: PolicyModel | None = None,
                 messages: MessageSource | None = None):  # fmt: skip
        self.cfg = cfg
        self.algo = cfg.algo
        self.env = env
        self.model = model or load_policy_model(str(self.algo.model), int(cfg.seed))
        self.policy = LMPolicy(self.algo, env, self.model)
        self.messages = messages or MESSAGE_SOURCES[self.algo.messages](self.model, self.algo, env)
        self.trains = algo_spec(self.algo.name).trains
        self.reset = env_functions(env)[0]
        self.rollouts = Rollout(cfg, env, self.policy, self.messages, self.trains)
        self.optimizer = optimizer(float(self.algo.actor_lr), float(self.algo.critic_lr),
                                   float(self.algo.max_grad_norm))  # fmt: skip

    @property
    def steps_per_iteration(self) -> int:
        return int(self.algo.num_envs) * int(self.algo.num_steps)

    @property
    def iterations(self) -> int:
        return int(self.algo.total_timesteps) // self.steps_per_iteration

    def init(self, seed_index: int) -> TrainState:
        k_lora, k_value, k_env = jax.random.split(seed_key(int(self.cfg.seed), seed_index), 3)
        lora = init_lora(k_lora, self.model.params, tuple(self.algo.lora_targets),
                         int(self.algo.lora_rank), float(self.algo.lora_alpha),
                         layers=self.policy.adapted_layers)  # fmt: skip
        value = self.policy.value_head.init(k_value, jnp.zeros((1, self.model.hidden_size)))
        trainable = {"lora": lora, "value": value}
        e = int(self.algo.num_envs)
        return TrainState(
            lora=lora,
            value=value,
            opt=self.optimizer.init(trainable),
            env=self.reset(jax.random.split(k_env, e)),
            episode_return=np.zeros(e, np.float32),
            episode_length=np.zeros(e, np.int32),
        )

    def checkpoint_tree(self, states: list[TrainState]) -> dict:
        return {f"seed{s}": dict(state) for s, state in enumerate(states)}

    def from_checkpoint(self, tree: dict) -> list[TrainState]:
        states = []
        for s in range(int(self.cfg.num_seeds)):
            state = TrainState(tree[f"seed{s}"])
            state["episode_return"] = np.asarray(state["episode_return"], np.float32)
            state["episode_length"] = np.asarray(state["episode_length"], np.int32)
            states.append(state)
        return states

    def summary(self, metrics: list[list[dict]]) -> dict:
        """The model, the time split and token rates over ``metrics`` (``[iteration][seed]``),
        the critic's cached prompts and, with a trunk, its cache's counts."""
        ran = [m for per_seed in metrics for m in per_seed]
        total = {k: sum(m[k] for m in ran) for k in (*TIME_SPLIT, *COUNTS)}
        out = {
            "model": self.model.name,
            "time_split_s": {k: total[k] for k in TIME_SPLIT},
            "lm_tokens_per_s": total["lm_tokens"] / total["lm_s"] if total["lm_s"] else None,
            "update_tokens_per_s": (
                total["update_tokens"] / total["update_s"] if total["update_s"] else None
            ),
            "critic_prompts_cached": len(self.policy.features),
            "lora_layers": str(self.algo.lora_layers),
        }
        if self.policy.split is not None:
            cache = self.policy.trunk_cache.stats()
            out["trunk_cache"] = {
                "hits": total["trunk_hits"],
                "misses": total["trunk_misses"],
                "hit_rate": hit_rate(total["trunk_hits"], total["trunk_misses"]),
                "entries": cache["entries"],
                "bytes": cache["bytes"],
                "evictions": cache["evictions"],
            }
        return out

    def rollout(self, state: TrainState, seed_index: int, iteration: int, clock: Clock):
        """``num_steps`` steps of every env; the decisions with their advantages, the
        finished episodes' (return, length, success), and the state after."""
        decisions, episodes, after = self.rollouts(state, seed_index, iteration, clock)
        return decisions, episodes, TrainState(state, **after)

    # -- update --
    def _grad(self, trainable, batch, states=None):
        p, a = self.policy, self.algo
        settings = (p.normalization, float(a.clip_eps), float(a.value_coef), float(a.entropy_coef))
        if p.split is None:
            return ppo_grad(self.model.lm, p.value_head, settings, self.model.params, trainable,
                            batch, p.cand_tokens, p.cand_valid, p.word_counts)  # fmt: skip
        batch = dict(batch)
        index = batch.pop("prompt_index")
        batch["prompt_states"], batch["cand_states"] = states[0][index], states[1][index]
        return ppo_grad_top(p.split, p.value_head, settings, p.top_params, trainable, batch,
                            p.cand_tokens, p.cand_valid, p.word_counts)  # fmt: skip

    def _kept_states(self, decisions: Decisions, data: dict, clock: Clock):
        """The trunk states of the decisions' prompts (from the rollout's buffer; those it
        lacks from the cache or the trunk), stacked once per distinct prompt
        (``data["prompt_index"]`` picks each decision's)."""
        unique = list(dict.fromkeys(decisions.prompts))
        kept = dict(decisions.trunk)
        lacking = [p for p in unique if p not in kept]
        if lacking:
            kept.update(self.policy.trunk_entries(lacking, clock))
        row = {p: i for i, p in enumerate(unique)}
        data["prompt_index"] = np.array([row[p] for p in decisions.prompts], np.int32)
        _, valid = self.policy.packed(unique)
        return pack_entries([kept[p] for p in unique], valid)

    def update(self, state: TrainState, decisions: Decisions, seed_index: int, iteration: int,
               clock: Clock) -> tuple[TrainState, dict]:  # fmt: skip
        """PPO epochs over fixed-size minibatches of the decisions; the last minibatch of
        an epoch is filled up with decisions drawn from the rest (one compiled shape)."""
        n = len(decisions.prompts)
        if n == 0:
            return state, {}
        t0 = time.perf_counter()
        tokens, valid = self.policy.packed(decisions.prompts)
        data = {
            "tokens": tokens,
            "valid": valid,
            "avail": np.stack(decisions.avail),
            "features": np.stack([self.policy.features[p] for p in decisions.prompts]),
            "actions": np.asarray(decisions.actions, np.int32),
            "log_probs": np.asarray(decisions.log_probs, np.float32),
            "values": np.asarray(decisions.values, np.float32),
            "advantages": np.asarray(decisions.advantages, np.float32),
            "returns": np.asarray(decisions.returns, np.float32),
        }
        states = None
        if self.policy.split is not None:
            data.pop("tokens")
            states = self._kept_states(decisions, data, clock)
        clock.text_s += time.perf_counter() - t0
        rng = np.random.default_rng([int(self.cfg.seed), seed_index, iteration, 1])
        size = int(self.algo.minibatch_size)
        trainable = {"lora": state["lora"], "value": state["value"]}
        opt_state = state["opt"]
        stats = []
        t0 = time.perf_counter()
        for _ in range(int(self.algo.update_epochs)):
            order = rng.permutation(n)
            order = np.concatenate([order, rng.choice(n, (-n) % size)])
            for start in range(0, len(order), size):
                batch = {k: v[order[start : start + size]] for k, v in data.items()}
                (_, info), grads = self._grad(trainable, batch, states)
                trainable, opt_state = apply_updates(self.optimizer, trainable, opt_state, grads)
                stats.append(jax.device_get(info))
                clock.update_tokens += int(batch["valid"].sum()) + size * self.policy.cand_size
            if self.algo.target_kl is not None and stats[-1]["approx_kl"] > self.algo.target_kl:
                break
        clock.update_s += time.perf_counter() - t0
        means = {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}
        return TrainState(state, lora=trainable["lora"], value=trainable["value"],
                          opt=opt_state), means  # fmt: skip

    def iteration(self, state: TrainState, seed_index: int, iteration: int):
        """One rollout and update of one seed: the new state and the seed's metrics."""
        clock = Clock()
        t0 = time.perf_counter()
        decisions, episodes, state = self.rollout(state, seed_index, iteration, clock)
        rollout_s = time.perf_counter() - t0
        losses = {}
        if self.trains:
            state, losses = self.update(state, decisions, seed_index, iteration, clock)
        wall = time.perf_counter() - t0
        nan = float("nan")
        metrics = {
            "episode_return": float(np.mean([x[0] for x in episodes])) if episodes else nan,
            "episode_length": float(np.mean([x[1] for x in episodes])) if episodes else nan,
            "win_rate": float(np.mean([x[2] for x in episodes])) if episodes else nan,
            "episodes": len(episodes),
            "decisions": len(decisions.prompts),
            "policy_loss": losses.get("policy_loss", nan),
            "value_loss": losses.get("value_loss", nan),
            "entropy": float(np.mean(decisions.entropies)) if decisions.prompts else nan,
            "approx_kl": losses.get("approx_kl", nan),
            "clip_frac": losses.get("clip_frac", nan),
            "iteration_s": wall,
            **clock.as_dict(),
            "rollout_steps_per_s": self.steps_per_iteration / rollout_s,
            "lm_tokens_per_s": clock.lm_tokens / clock.lm_s if clock.lm_s else nan,
            "update_tokens_per_s": clock.update_tokens / clock.update_s if clock.update_s else nan,
            "trunk_hit_rate": hit_rate(clock.trunk_hits, clock.trunk_misses),
        }
        return state, metrics


@functools.cache
def salad_env(name: str, kwargs_json: str):
    """One kitchen per name and kwargs in a process, so that runs share its compiled
    functions (keyed by the env object)."""
    import envs

    return envs.make(name, **json.loads(kwargs_json))


def make_salad_env(cfg: DictConfig):
    """``cfg.env``'s kitchen (an env with ``TextObservations``)."""
    kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    try:
        env = salad_env(str(cfg.env.name), json.dumps(kwargs, sort_keys=True))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"bad value for config key 'env.kwargs' ({kwargs}): {e}") from e
    try:
        require(env, TextObservations, needed_by=f"algo.name={cfg.algo.name}")
    except ValueError as e:
        raise ConfigError(f"bad value for config key 'env.name': {e}") from None
    return env


def make_trainer(cfg: DictConfig) -> Trainer:
    """The runner's ``HostTrainer`` of ``cfg`` (``runner.host_loop`` drives it)."""
    return Trainer(cfg, make_salad_env(cfg))
