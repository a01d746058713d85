"""A one-step bandit learner over kitchen prompts (``bandit_prompts``) with the TWOSOME
trainer's own policy and update: per update, a minibatch of prompts is drawn, each is
scored by ``LMPolicy.score_prompts`` and an action is sampled from its distribution over
the available actions (the rollout's ``masked_log_pi``), reward 1 for the rewarded action
and 0 else, and ``Trainer.update`` takes one PPO step on these one-step returns (one
epoch, one minibatch: the ratio is 1 and the clipped loss is REINFORCE with the
minibatch's mean reward as baseline, scaled by its spread). ``algo.lora_layers`` and
``algo.actor_lr`` are the trainer's settings, so ``all`` and ``last:K`` run the code a
training run runs.
"""

from __future__ import annotations

import time

import numpy as np

from jaxmarl_llm.config import build_config
from jaxmarl_llm.methods.verco.bandit_prompts import BanditPrompt
from jaxmarl_llm.methods.verco.clock import Clock
from jaxmarl_llm.methods.verco.models import PolicyModel
from jaxmarl_llm.methods.verco.rollout import Decisions, entropy, masked_log_pi
from jaxmarl_llm.methods.verco.trainer import Trainer, TrainState


def bandit_config(model: str, layers: str, lr: float, batch: int, seed: int,
                  max_prompt_tokens: int = 96):  # fmt: skip
    """A TWOSOME run's config whose update is one PPO step on ``batch`` decisions."""
    return build_config({
        "name": "lm_bandit",
        "seed": seed,
        "env": {"name": "salad:A"},
        "algo": {"name": "twosome", "model": model, "messages": "none",
                 "num_envs": (batch + 1) // 2, "num_steps": 1, "total_timesteps": batch,
                 "minibatch_size": batch, "update_epochs": 1, "actor_lr": lr,
                 "lora_layers": layers, "max_prompt_tokens": max_prompt_tokens},
        "progress": False,
        "plot": False,
    })  # fmt: skip


class BanditLearner:
    """One seed of one setting: the trainer's state and the bandit's random stream."""

    def __init__(self, cfg, env, model: PolicyModel, train: list[BanditPrompt],
                 test: list[BanditPrompt]):  # fmt: skip
        self.trainer = Trainer(cfg, env, model=model)
        self.policy = self.trainer.policy
        self.train, self.test = train, test
        self.batch = int(cfg.algo.minibatch_size)
        self.state: TrainState = self.trainer.init(0)
        self.rng = np.random.default_rng([int(cfg.seed), 55])
        self.updates = 0

    def sample(self, prompts: list[BanditPrompt]) -> tuple[Decisions, np.ndarray]:
        """An action of the current policy for each prompt and its reward."""
        policy, clock = self.policy, Clock()
        texts = [p.prompt for p in prompts]
        decisions = Decisions(prompts=texts)
        scored = policy.score_prompts(self.state["lora"], list(dict.fromkeys(texts)), clock,
                                      keep=decisions.trunk)  # fmt: skip
        # the critic plays no part in a one-step bandit (the advantage is the reward): with
        # lora_layers=all its features would cost a second model pass per new prompt
        no_features = np.zeros(self.trainer.model.hidden_size, np.float32)
        for text in texts:
            policy.features.setdefault(text, no_features)
        values = policy.values(self.state["value"], texts, clock)
        rewards = np.zeros(len(prompts))
        for i, (p, value) in enumerate(zip(prompts, values, strict=True)):
            log_pi = masked_log_pi(scored[p.prompt], p.avail)
            action = int(self.rng.choice(policy.num_actions, p=np.exp(log_pi)))
            rewards[i] = float(action == p.rewarded)
            decisions.avail.append(p.avail)
            decisions.actions.append(action)
            decisions.log_probs.append(float(log_pi[action]))
            decisions.entropies.append(entropy(log_pi))
            decisions.values.append(float(value))
        decisions.advantages = rewards.tolist()
        decisions.returns = rewards.tolist()
        return decisions, rewards

    def step(self) -> dict:
        """One bandit update on a fresh minibatch; the sampled actions' mean reward."""
        t0 = time.perf_counter()
        pick = self.rng.choice(len(self.train), self.batch, replace=len(self.train) < self.batch)
        decisions, rewards = self.sample([self.train[i] for i in pick])
        self.state, losses = self.trainer.update(self.state, decisions, 0, self.updates, Clock())
        self.updates += 1
        return {
            "update": self.updates,
            "samples": self.updates * self.batch,
            "reward": float(rewards.mean()),
            "entropy": float(np.mean(decisions.entropies)),
            "policy_loss": losses.get("policy_loss", float("nan")),
            "update_s": time.perf_counter() - t0,
        }

    def evaluate(self) -> dict:
        """Held-out greedy accuracy and mean probability of the rewarded action."""
        scored = self.policy.score_prompts(
            self.state["lora"], list(dict.fromkeys(p.prompt for p in self.test)), Clock()
        )
        hits, probs = [], []
        for p in self.test:
            log_pi = masked_log_pi(scored[p.prompt], p.avail)
            hits.append(float(np.argmax(log_pi) == p.rewarded))
            probs.append(float(np.exp(log_pi[p.rewarded])))
        return {"test_accuracy": float(np.mean(hits)), "test_prob": float(np.mean(probs))}

    def run(self, updates: int, eval_every: int) -> list[dict]:
        """``updates`` steps; every row has the update's numbers, every ``eval_every``-th
        (and the first, before any update, and the last) the held-out ones too."""
        curve = [{"update": 0, "samples": 0, **self.evaluate()}]
        for u in range(1, updates + 1):
            row = self.step()
            if u % eval_every == 0 or u == updates:
                row.update(self.evaluate())
            curve.append(row)
        return curve
