"""Settings of DPM (``shaping.name: dpm``, the keys of ``shaping.kwargs``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LABELERS = ("heuristic", "backend")
CACHE_MODES = ("use", "replay")
PREFERENCES = ("both", "trajectory", "agent")
SELECTIONS = ("kendall", "random")


@dataclass
class DPMConfig:
    """How DPM collects dual preferences online and trains its reward-model ensemble.

    Defaults follow the paper (appendix A.4, C, D.1): 10 feedback rounds of 150 labels
    (75 trajectory comparisons and 75 agent rankings when ``preferences: both``), an
    ensemble of 3 reward nets with 16-unit encoders of state, next state, observation and
    action, and Kendall-tau selection of the queries the ensemble agrees on least. The
    paper asks every 1,500 episodes; here a round comes every ``every`` learner updates.
    With QMIX's 8 envs x 128 steps per update, the default 20 updates are 20,480 env
    steps: about 360 SMAX 3m episodes early in training (random-play episodes last about
    56 steps), 1,300 once the team wins quickly (about 16 steps). The ten rounds end at
    200k env steps, within the first 40% of a 500k-step run. On maps with long episodes
    the paper's interval is longer: 1,500 2s3z episodes of 70-85 steps are about 100
    updates, and ``every: 80`` (rounds until 819k) kept a learning 2s3z seed from the
    collapse seen after rounds that end at 205k (experiments/RESULTS.md, DPM).
    """

    preferences: str = "both"
    # heuristic: the scripted teacher (appendix D.2 criteria) on arrays; backend: the
    # appendix E prompts through a language-model backend (scripted teacher behind the
    # text interface, gemma, or an OpenAI-compatible http endpoint), cached in a store
    labeler: str = "heuristic"
    backend: str = "scripted"
    backend_options: dict[str, Any] = field(default_factory=dict)
    store: str | None = None  # label store path; default <run_dir>/dpm/labels.sqlite
    cache_mode: str = "use"  # replay: answer only from the store, never the model
    max_tokens: int = 300
    temperature: float = 0.0
    max_retries: int = 2
    # describe only the first k allies in agent-ranking prompts (section 4.5); 0: all
    describe_agents: int = 0
    # array teacher: rank healthy allies that do not attack lowest even with no enemy in
    # range (default: unrated, they may be closing in); experiments/RESULTS.md, DPM
    idle_out_of_range: bool = False
    # array teacher: a trajectory segment's value is enemy_damage_weight x enemy health lost
    # minus ally health lost (1: the paper's two criteria weighed alike)
    enemy_damage_weight: float = 1.0
    # scripted teacher noise: probability an answer is flipped
    mistake: float = 0.0
    rounds: int = 10
    every: int = 20  # learner updates between feedback rounds
    labels_per_round: int = 150  # split evenly between the two types with 'both'
    segment_length: int = 8  # steps of a compared trajectory segment
    collect_steps: int = 256  # policy steps per env played for each round's candidates
    selection: str = "kendall"
    # a candidate qualifies when the ensemble's mean Kendall tau is below the threshold,
    # which falls linearly from threshold_start (round 0) to threshold_end (last round);
    # too few qualifying candidates are filled with the least-agreed ones
    threshold_start: float = 1.0
    threshold_end: float = 0.5
    ensemble_size: int = 3
    encoder_width: int = 16
    hidden: int = 16
    fit_steps: int = 500
    batch_size: int = 64
    lr: float = 1e-3
    # after each refit the intrinsic reward is scaled so that its std over the round's
    # collected transitions is reward_scale (0 keeps the raw outputs); before the first
    # round it is 0 (an untrained net's output is noise)
    reward_scale: float = 0.05
    # ... and shifted to mean 0 over them. The preference losses cannot see a constant
    # offset, so the fitted one is arbitrary; left in, it pays the team for every step an
    # episode lasts (or for ending it early) and can outweigh winning
    # (experiments/RESULTS.md, DPM, 2026-11-25 evening). false: the raw offset, as before.
    center_reward: bool = True
    # ... at this quantile of the round's intrinsic rewards instead of their mean (None).
    # 1.0 puts the shift at the maximum: the reward is <= 0 on every transition of the
    # round, a cost per step that can never pay a team for making episodes last (the
    # failure of the 2s3z seeds), only for ending them sooner, by winning or by losing.
    # Measured on 3m: it frees the stalling seed of agent-only runs, and makes a
    # both-types seed pair rush and lose in 6 steps (experiments/RESULTS.md, DPM)
    center_quantile: float | None = None
    # ... at the mean over the round's transitions in which no unit's health changed
    # (the teacher's value of such a step is 0: nothing happened) instead of the mean over
    # all of them. The teacher scores health traded, which telescopes over an episode; with
    # its zero on quiet steps the intrinsic return follows that score, and how long an
    # episode lasts neither pays nor costs by itself (the mean's zero makes quiet steps pay
    # whenever fights score below average, and cost when above: the stall and the rush
    # measured on 3m, experiments/RESULTS.md, DPM). Rounds without a quiet step use the mean.
    center_neutral: bool = False
    # ... and, when the learner samples, shifted again to mean 0 over the sampled batch.
    # The round's centring holds on the states of the round; a policy that drifts after the
    # last round can reach states the fixed ensemble pays well on average (on 2s3z a
    # collapsed seed was paid +116 per episode against 1 for a win). Batch centring takes
    # that average out, but not the differences: on 3m both seeds then learned to avoid
    # the enemy until the time limit (experiments/RESULTS.md, DPM), so it is off.
    center_on_batch: bool = False
    # learner updates over which the intrinsic reward fades linearly to 0 after the last
    # round, leaving the env reward alone (0: it stays on to the end, as in the paper).
    # The fixed post-round model keeps paying whatever it pays on states the policy
    # reaches later; seeds that won 0.7-0.9 of their test episodes collapsed hundreds of
    # thousands of steps after the last round (experiments/RESULTS.md, DPM)
    fade_updates: int = 0
    # 0: every seed's fade starts at the last round. Above 0: a seed's fade starts only
    # after the first chunk past the last round in which it won at least this fraction of
    # its training episodes. A fixed start stranded a seed that had not yet learned to
    # fight (3m, 0.00 with fading against 0.90 without; experiments/RESULTS.md, DPM).
    fade_after_win: float = 0.0
    # the reward is the members' mean less pessimism x their std (0: the mean, as in the
    # paper). The members agree where the labels constrain them and disagree on states no
    # round saw; a policy that drifts there after the last round was paid for stalling
    # (on 8m a stalled seed's states had 6x the members' std of a winning seed's). The
    # refit centres and scales this pessimistic reward, so on the round's own transitions
    # it is no cost on average.
    pessimism: float = 0.0

    @staticmethod
    def check(cfg: DPMConfig) -> None:
        for key, valid in (
            ("preferences", PREFERENCES),
            ("selection", SELECTIONS),
            ("labeler", LABELERS),
            ("cache_mode", CACHE_MODES),
        ):
            if getattr(cfg, key) not in valid:
                raise ValueError(f"{key}={getattr(cfg, key)!r}; valid choices: {', '.join(valid)}")
        for key in (
            "every",
            "labels_per_round",
            "segment_length",
            "collect_steps",
            "ensemble_size",
            "encoder_width",
            "hidden",
            "fit_steps",
            "batch_size",
        ):
            if getattr(cfg, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(cfg, key)}")
        for key in ("rounds", "describe_agents", "fade_updates"):
            if getattr(cfg, key) < 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(cfg, key)}")
        if not 0.0 <= cfg.fade_after_win <= 1.0:
            raise ValueError(f"fade_after_win must be in [0, 1], got {cfg.fade_after_win}")
        if cfg.fade_after_win > 0 and cfg.fade_updates < 1:
            raise ValueError("fade_after_win needs fade_updates >= 1 (the length of the fade)")
        if cfg.labeler == "heuristic" and cfg.backend_options:
            raise ValueError("backend_options are only used with labeler=backend")
        if cfg.labeler == "heuristic" and cfg.backend != "scripted":
            raise ValueError(
                f"backend={cfg.backend!r} is only used with labeler=backend (labeler=heuristic "
                "labels with the array teacher and never calls a backend)"
            )
        if cfg.preferences == "both" and cfg.labels_per_round < 2:
            raise ValueError("preferences=both needs labels_per_round >= 2 (one of each type)")
        if not 0.0 <= cfg.mistake <= 1.0:
            raise ValueError(f"mistake must be in [0, 1], got {cfg.mistake}")
        if cfg.collect_steps < cfg.segment_length:
            raise ValueError(
                f"collect_steps={cfg.collect_steps} must be >= segment_length={cfg.segment_length}"
            )
        at = cfg.center_quantile
        if at is not None and not 0.0 <= at <= 1.0:
            raise ValueError(f"center_quantile must be in [0, 1] or null, got {at}")
        if at is not None and not cfg.center_reward:
            raise ValueError("center_quantile needs center_reward: true (it sets where to centre)")
        if cfg.center_neutral and (at is not None or not cfg.center_reward):
            raise ValueError(
                "center_neutral needs center_reward: true and no center_quantile (it sets "
                "where to centre)"
            )
        if cfg.enemy_damage_weight <= 0:
            raise ValueError(f"enemy_damage_weight must be > 0, got {cfg.enemy_damage_weight}")
        if cfg.pessimism < 0:
            raise ValueError(f"pessimism must be >= 0, got {cfg.pessimism}")
        if cfg.lr <= 0 or cfg.reward_scale < 0:
            raise ValueError("lr must be > 0 and reward_scale >= 0")

    @property
    def trajectory_labels(self) -> int:
        return {"both": self.labels_per_round // 2, "trajectory": self.labels_per_round}.get(
            self.preferences, 0
        )

    @property
    def agent_labels(self) -> int:
        return (
            self.labels_per_round - self.trajectory_labels
            if self.preferences != "trajectory"
            else 0
        )
