"""One iteration's rollout of a seed: ``num_envs`` kitchens for ``num_steps`` steps (env
reset and step jitted and vmapped; the text in between on the host).

Per step, an agent *decides* only where more than one action is available: while its
macro-action runs (or where only "wait" is left) its one action is taken without asking
the model. A deciding agent's prompt is its observation text, its teammate's message (a
``MessageSource``) and TWOSOME's cue, "you should"; the candidates are the action phrases,
scored in one batch over the distinct prompts of the step, each prompt scored once per
rollout (the adapter is fixed during it). A training rollout ends with every decision's
semi-MDP advantage and return (``semi_mdp``).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.methods.verco.clock import Clock
from jaxmarl_llm.methods.verco.lm_policy import LMPolicy
from jaxmarl_llm.methods.verco.message_sources import MessageSource
from jaxmarl_llm.methods.verco.semi_mdp import semi_mdp_advantages
from jaxmarl_llm.methods.verco.trunk import TrunkEntry

PROMPT_CUE = "To make the salad, you should"


def action_prompt(observation: str, message: str) -> str:
    """TWOSOME-style prompt: the observation without its action list, the teammate's
    message, and the cue the action phrases continue."""
    seen = observation.split(" Actions:")[0].split(" You are busy")[0]
    said = f' Your teammate says: "{message}".' if message else ""
    return f"{seen}{said} {PROMPT_CUE}"


def seed_key(seed: int, seed_index: int) -> jax.Array:
    """The key of a run's seed ``seed_index``: its initial state and every rollout's env
    steps derive from it."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), seed_index)


@dataclass
class Decisions:
    """One iteration's decisions of every agent, flat."""

    prompts: list[str] = field(default_factory=list)
    avail: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)  # of the policy at each decision
    values: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    # with algo.lora_layers=last:K, the trunk states of the prompts scored, by prompt
    trunk: dict[str, TrunkEntry] = field(default_factory=dict)


def masked_log_pi(log_pi_all: np.ndarray, avail: np.ndarray) -> np.ndarray:
    """``log pi`` renormalised over the available actions (``-inf`` elsewhere): the same
    distribution ``masked_log_softmax`` gives from the scores."""
    x = np.where(avail, log_pi_all.astype(np.float64), -np.inf)
    return x - np.logaddexp.reduce(x[avail])


def entropy(log_pi: np.ndarray) -> float:
    finite = np.isfinite(log_pi)
    return float(-np.sum(np.exp(log_pi[finite]) * log_pi[finite]))


@functools.cache
def env_functions(env):
    """Jitted, env-vmapped ``reset(keys)``, ``avail(states) -> [E, 2, A]`` and
    ``step(keys, states, actions [E, 2]) -> (states, reward, done, success, length)`` with
    the reset after an episode's end."""

    def avail(state):
        masks = env.get_avail_actions(state)
        return jnp.stack([masks[a] for a in env.agents])

    def step(key, state, actions):
        step_key, reset_key = jax.random.split(key)
        acts = {a: actions[i] for i, a in enumerate(env.agents)}
        _, stepped, rewards, dones, _ = env.step_env(step_key, state, acts)
        done = dones["__all__"]
        _, fresh = env.reset(reset_key)
        state = jax.tree.map(lambda r, s: jnp.where(done, r, s), fresh, stepped)
        return state, rewards[env.agents[0]], done, stepped.delivered, stepped.step

    reset = jax.jit(jax.vmap(lambda k: env.reset(k)[1]))
    return reset, jax.jit(jax.vmap(avail)), jax.jit(jax.vmap(step))


class Rollout:
    """A run's rollouts: the policy scores, ``messages`` fill the prompts; with ``trains``
    the critic values every decision and the rollout ends with the advantages."""

    def __init__(self, cfg, env, policy: LMPolicy, messages: MessageSource, trains: bool):
        self.seed = int(cfg.seed)
        self.algo = cfg.algo
        self.policy = policy
        self.messages = messages
        self.trains = trains
        _, self.avail, self.step = env_functions(env)

    def __call__(self, state, seed_index: int, iteration: int, clock: Clock):
        """``num_steps`` steps of every env from a seed's ``state``: the decisions with
        their advantages, the finished episodes' (return, length, success), and the
        state's fields after (``env``, ``episode_return``, ``episode_length``)."""
        algo, policy = self.algo, self.policy
        e, horizon = int(algo.num_envs), int(algo.num_steps)
        rng = np.random.default_rng([self.seed, seed_index, iteration])
        keys = jax.random.split(jax.random.fold_in(seed_key(self.seed, seed_index), iteration + 1),
                                horizon * e).reshape(horizon, e, -1)  # fmt: skip
        lora = state["lora"] if self.trains else None
        env_state = state["env"]
        ep_return = state["episode_return"].astype(np.float64)
        ep_length = state["episode_length"].copy()
        scored: dict[str, np.ndarray] = {}
        streams = [[[] for _ in range(2)] for _ in range(e)]  # per env/agent: decision ids
        steps_of: list[int] = []
        decisions = Decisions()
        rewards = np.zeros((horizon, e))
        dones = np.zeros((horizon, e), bool)
        episodes = []
        for t in range(horizon):
            t0 = time.perf_counter()
            avail = np.asarray(self.avail(env_state))
            clock.env_s += time.perf_counter() - t0
            deciders = [(i, a) for i in range(e) for a in range(2) if avail[i, a].sum() > 1]
            actions = avail.argmax(-1).astype(np.int32)  # a forced agent's one action
            if deciders:
                prompts = self._prompts(env_state, deciders, clock)
                new = list(dict.fromkeys(p for p in prompts if p not in scored))
                if new:
                    scored.update(policy.score_prompts(lora, new, clock, keep=decisions.trunk))
                values = policy.values(state["value"], prompts, clock) if self.trains else \
                    np.zeros(len(prompts))  # fmt: skip
                t0 = time.perf_counter()
                for (i, a), prompt, value in zip(deciders, prompts, values, strict=True):
                    log_pi = masked_log_pi(scored[prompt], avail[i, a])
                    action = int(rng.choice(policy.num_actions, p=np.exp(log_pi)))
                    actions[i, a] = action
                    streams[i][a].append(len(decisions.prompts))
                    steps_of.append(t)
                    decisions.prompts.append(prompt)
                    decisions.avail.append(avail[i, a])
                    decisions.actions.append(action)
                    decisions.log_probs.append(float(log_pi[action]))
                    decisions.entropies.append(entropy(log_pi))
                    decisions.values.append(float(value))
                clock.text_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            env_state, reward, done, success, length = self.step(keys[t], env_state, actions)
            reward, done = np.asarray(reward), np.asarray(done)
            success, length = np.asarray(success), np.asarray(length)
            clock.env_s += time.perf_counter() - t0
            rewards[t], dones[t] = reward, done
            ep_return += reward
            ep_length += 1
            for i in np.flatnonzero(done):
                episodes.append((ep_return[i], int(length[i]), bool(success[i])))
                ep_return[i], ep_length[i] = 0.0, 0
        if self.trains:
            self._advantages(env_state, streams, steps_of, decisions, rewards, dones, state, clock)
        after = dict(env=env_state, episode_return=ep_return.astype(np.float32),
                     episode_length=ep_length)  # fmt: skip
        return decisions, episodes, after

    def _prompts(self, env_state, agents: list[tuple[int, int]], clock: Clock) -> list[str]:
        """The action prompts of ``agents`` ``(env, agent)``, with their teammates' messages."""
        t0 = time.perf_counter()
        obs = self.policy.text.text_observations(env_state)
        senders = [(i, 1 - a) for i, a in agents]
        said = self.messages.messages([obs[i][j] for i, j in senders], senders, env_state)
        prompts = [action_prompt(obs[i][a], m) for (i, a), m in zip(agents, said, strict=True)]
        clock.text_s += time.perf_counter() - t0
        return prompts

    def _advantages(self, env_state, streams, steps_of, decisions, rewards, dones, state, clock):
        e = len(streams)
        everyone = [(i, a) for i in range(e) for a in range(2)]
        last_values = self.policy.values(
            state["value"], self._prompts(env_state, everyone, clock), clock
        ).reshape(e, 2)
        t0 = time.perf_counter()
        decisions.advantages = [0.0] * len(decisions.prompts)
        decisions.returns = [0.0] * len(decisions.prompts)
        for i in range(e):
            for a in range(2):
                ids = streams[i][a]
                if not ids:
                    continue
                adv, ret = semi_mdp_advantages(
                    [steps_of[d] for d in ids], [decisions.values[d] for d in ids],
                    rewards[:, i], dones[:, i], float(last_values[i, a]),
                    float(self.algo.gamma), float(self.algo.gae_lambda),
                )  # fmt: skip
                for d, x, r in zip(ids, adv, ret, strict=True):
                    decisions.advantages[d], decisions.returns[d] = float(x), float(r)
        clock.text_s += time.perf_counter() - t0
