"""The ``algo`` keys every PPO-family learner has (``ppo.PPOConfig``, ``happo.HAPPOConfig``).

A learner's schema extends ``OnPolicyConfig`` with its own keys and may change a default;
the defaults here are the common PPO setting (CleanRL/PureJaxRL/JaxMARL).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from jaxmarl_llm.learners.networks import Activation

TEAM_REWARDS = ("none", "sum", "mean")  # algo.team_reward's values


@dataclass
class OnPolicyConfig:
    name: str = MISSING  # algo.name, one of the learner's algorithms (learners/registry.py)
    total_timesteps: int = 1_000_000  # env steps per seed, all envs (whole updates are run)
    num_envs: int = 16  # parallel envs per seed (split over a mesh's data devices)
    num_steps: int = 128  # env steps per env in each update's rollout
    lr: float = 2.5e-4  # Adam step size, > 0 (HAPPO: the actors'; critic_lr the critic's)
    anneal_lr: bool = True  # linearly to 0 at the budget (so the run cannot be extended)
    update_epochs: int = 4  # passes over each rollout per update (HAPPO: per actor, critic)
    num_minibatches: int = 4  # per epoch; divides num_envs * num_steps (GRU: num_envs)
    gamma: float = 0.99  # discount per env step, in [0, 1]
    gae_lambda: float = 0.95  # GAE's lambda, in [0, 1]
    clip_eps: float = 0.2  # policy ratios clipped to 1 +- clip_eps; the value clip's width
    clip_value: bool = True  # the value loss is PPO2's pessimistic clipped one
    ent_coef: float = 0.01  # weight of the policy entropy bonus in the loss
    vf_coef: float = 0.5  # weight of the value loss in the loss
    max_grad_norm: float = 0.5  # global-norm gradient clip (HAPPO: each actor, the critic)
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])  # MLP hidden widths
    activation: Activation = Activation.tanh  # hidden-layer nonlinearity: tanh, relu, gelu
    agent_ids: bool = True  # a one-hot agent id after the actors' (and IPPO critic's) obs
    normalize_advantages: bool = True  # standardised (PPO: per minibatch; HAPPO: rollout)
    # EPyMARL's standardise_rewards: rewards (env + shaping) by running mean/std, before GAE
    standardize_rewards: bool = False
    # none: agent i trains on its own (shaped) reward; sum or mean: every agent trains on
    # the team's, its agents' shaped rewards reduced (EPyMARL's common_reward)
    team_reward: str = "none"
