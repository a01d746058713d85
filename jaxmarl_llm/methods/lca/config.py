"""Settings of LCA (``shaping.name: lca``, the keys of ``shaping.kwargs``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LABELERS = ("heuristic", "backend")
PAIR_SOURCES = ("rollout", "uniform", "mixed", "scripted", "completion")
QUERY_MODES = ("generate", "score")
CACHE_MODES = ("use", "replay")
TEAM_GOALS = ("written", "infer")


@dataclass
class LCAConfig:
    """How LCA samples, labels and learns its per-agent potentials.

    Labels come either from the env's ranking heuristic as arrays (``labeler: heuristic``,
    the paper's "human ranking heuristic" and its synthetic noisy versions, millions of
    labels per second) or from a language-model backend through the text prompts
    (``labeler: backend``: the scripted teacher behind the text interface, the local
    Gemma model, or any OpenAI-compatible endpoint), cached in a label store.
    """

    labeler: str = "heuristic"
    # backend labeler: kind and options for jaxmarl_llm.lm.factory.make_backend
    backend: str = "scripted"
    backend_options: dict[str, Any] = field(default_factory=dict)
    query_mode: str = "generate"  # generate: parse the answer; score: compare answer log-probs
    temperature: float = 0.0  # > 0 for several differing answers per pair from a model
    max_tokens: int = 16
    shuffle_order: bool = True  # show the later state first half the time (position bias)
    store: str | None = None  # label store path; default <run_dir>/lca/labels.sqlite
    cache_mode: str = "use"  # replay: answer only from the store, never the model
    max_retries: int = 2  # malformed answers asked again before abstaining
    # team target and key steps of the ranking prompts: written (the env's hand-written
    # text) | infer (the backend's answer for a sampled trajectory's rewards, sec. 4.1)
    team_goal: str = "written"
    goal_max_tokens: int = 256  # answer length of the team-goal query
    # pairs and queries
    num_pairs: int = 4400  # (transition, agent) pairs labelled in total
    num_queries: int = 1  # answers per pair, aggregated into a confidence (eq. 3)
    accuracy: float = 1.0  # heuristic labeler: probability an answer is not flipped
    # rollout (random play) | uniform (random states) | mixed | scripted (the env's scripted
    # policy, a random action with probability scripted_epsilon: demonstration-like states)
    # | completion (random play with no step limit, pairs from trajectories that complete
    # the task within completion_horizon steps: the paper's sec. 4.1 sampling)
    pair_source: str = "mixed"
    scripted_epsilon: float = 0.3
    rollout_envs: int = 64
    completion_horizon: int = 4096
    # state-scoring model
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    fit_steps: int = 2000
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-4
    val_fraction: float = 0.1
    # reward: r_i = scale * (sigma_i(o'_i) - gamma * ... ); scale makes the mean |r_i| over
    # the labelled moving transitions equal step_scale. 0 keeps the raw potential (the
    # paper's eq. 4); a model fitted on consistent labels moves several logits per step
    # (3.5-4.7 on the three tasks), which then outweighs the team reward
    step_scale: float = 0.1
    # ... but a model whose mean step is below min_step (in logits of the Bradley-Terry
    # model) is scaled as if it were min_step: a model fitted on uninformative labels has
    # near-flat potentials, and its rewards should stay near zero (the robustness of
    # potential-difference rewards to uncertain rankings), not be blown up to step_scale
    min_step: float = 1.0
    gamma: float = 1.0
    # Iterative LCA (not in the paper, which ranks one batch of pairs before training):
    # after every ``online_every`` updates, up to ``online_rounds`` times, each seed's
    # learner plays ``online_collect_steps`` steps of its current policy, ``online_pairs``
    # of those transitions' (transition, agent) pairs are ranked like the first batch, and
    # the seed's model is refitted (``online_fit_steps`` steps, warm) on everything ranked
    # so far. Pairs then follow the states the team actually reaches.
    online_rounds: int = 0
    online_every: int = 50
    online_pairs: int = 1000
    online_collect_steps: int = 16
    online_fit_steps: int = 1000

    @staticmethod
    def check(cfg: LCAConfig) -> None:
        for key, valid in (
            ("labeler", LABELERS),
            ("pair_source", PAIR_SOURCES),
            ("query_mode", QUERY_MODES),
            ("cache_mode", CACHE_MODES),
            ("team_goal", TEAM_GOALS),
        ):
            if getattr(cfg, key) not in valid:
                raise ValueError(f"{key}={getattr(cfg, key)!r}; valid choices: {', '.join(valid)}")
        for key in (
            "num_pairs",
            "num_queries",
            "rollout_envs",
            "completion_horizon",
            "fit_steps",
            "batch_size",
            "online_every",
            "online_pairs",
            "online_collect_steps",
            "online_fit_steps",
            "goal_max_tokens",
        ):
            if getattr(cfg, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(cfg, key)}")
        if cfg.online_rounds < 0:
            raise ValueError(f"online_rounds must be >= 0, got {cfg.online_rounds}")
        if not 0.0 <= cfg.scripted_epsilon <= 1.0:
            raise ValueError(f"scripted_epsilon must be in [0, 1], got {cfg.scripted_epsilon}")
        if not 0.0 <= cfg.accuracy <= 1.0:
            raise ValueError(f"accuracy must be in [0, 1], got {cfg.accuracy}")
        if not 0.0 <= cfg.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in [0, 1), got {cfg.val_fraction}")
        if cfg.step_scale < 0 or cfg.lr <= 0 or cfg.temperature < 0 or cfg.min_step <= 0:
            raise ValueError("step_scale and temperature must be >= 0, lr and min_step > 0")
        if cfg.labeler == "backend" and cfg.query_mode == "score" and cfg.num_queries > 1:
            raise ValueError(
                "query_mode=score gives one deterministic answer per pair; use "
                "query_mode=generate with temperature > 0 for num_queries > 1"
            )
        if cfg.team_goal == "infer" and cfg.labeler != "backend":
            raise ValueError(
                "team_goal=infer needs labeler=backend: the heuristic labeler reads no prompt"
            )
        if cfg.labeler == "heuristic" and cfg.backend_options:
            raise ValueError("backend_options are only used with labeler=backend")
