"""Settings of DPM (``shaping.name: dpm``, the keys of ``shaping.kwargs``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

LABELERS = ("heuristic", "backend")
CACHE_MODES = ("use", "replay")
PREFERENCES = ("both", "trajectory", "agent")
SELECTIONS = ("kendall", "random")
SEGMENTS = ("window", "episode")
CENTERINGS = ("mean", "neutral", "none")  # or a number: the quantile
_OLD_CENTERING = ("center_reward", "center_quantile", "center_neutral")
_OLD_FADE = ("fade_updates", "fade_after_win")


@dataclass
class Fade:
    """The intrinsic reward's fade to 0 after the last feedback round."""

    updates: int = MISSING  # learner updates over which it falls linearly from 1 to 0
    # 0: every seed's fade starts at the last round; above 0: a seed's fade starts after
    # the first chunk past the last round in which it won this fraction of its episodes
    after_win: float = 0.0


@dataclass
class DPMConfig:
    """How DPM collects dual preferences online and trains its reward-model ensemble.

    Defaults follow the paper (appendix A.4, C, D.1): 10 feedback rounds of 150 labels (75
    trajectory comparisons and 75 agent rankings when ``preferences: both``), an ensemble of
    3 reward nets with 16-unit encoders of state, next state, observation and action, and
    Kendall-tau selection of the queries the ensemble agrees on least. The paper asks every
    1,500 episodes (``every: null, feedback_every_episodes: 1500``); by default a round
    comes every ``every`` learner updates. With QMIX's 8 envs x 128 steps per update, the
    default 20 updates are 20,480 env steps: about 360 SMAX 3m episodes early in training
    (random-play episodes last about 56 steps), 1,300 once the team wins quickly (about 16
    steps). The ten rounds end at 200k env steps, within the first 40% of a 500k-step run.
    On maps with long episodes the paper's interval is longer: 1,500 2s3z episodes of 70-85
    steps are about 100 updates.
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
    # range (default: unrated, they may be closing in)
    idle_out_of_range: bool = False
    # array teacher: a trajectory segment's value is enemy_damage_weight x enemy health lost
    # minus ally health lost (1: the paper's two criteria weighed alike)
    enemy_damage_weight: float = 1.0
    # scripted teacher noise: probability an answer is flipped
    mistake: float = 0.0
    rounds: int = 10
    every: int | None = 20  # learner updates between feedback rounds (null: by episodes)
    # training episodes ended per seed (mean over seeds) between rounds, checked after
    # every chunk; needs every: null
    feedback_every_episodes: int | None = None
    labels_per_round: int = 150  # split evenly between the two types with 'both'
    # what a trajectory query compares: window (segment_length consecutive steps of one
    # episode) | episode (whole episodes that start and end in the candidates' play, of
    # at most segment_length steps, as the paper's prompt shows an episode's outcome)
    segments: str = "window"
    segment_length: int = 8  # steps of a window; the longest episode an episode query takes
    # policy steps per env played for each round's candidates. The paper samples them from
    # the replay buffer; here they are the current policy's play (QMIX's buffer keeps no
    # env states for the teacher), and Kendall selection needs many more candidates than
    # queries to choose from: a round reports how many candidates were valid
    collect_steps: int = 256
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
    # where each refit puts the reward's zero, over the round's transitions. The
    # preference losses cannot see a constant offset, so the fitted one is arbitrary; left
    # in, it pays the team for every step an episode lasts (or for ending it early).
    # mean: their mean; neutral: the mean over those in which no unit's health changed
    # (the teacher's zero, so that episode length alone neither pays nor costs; the mean
    # when a round has none); a number q in [0, 1]: their q-quantile (1.0: the maximum, a
    # cost per step that never pays a team for making episodes last); none: the raw offset
    centering: float | int | str = "mean"
    # ... and, when the learner samples, shifted again to mean 0 over the sampled batch,
    # which takes out the average a drifting policy finds on states no round saw
    center_on_batch: bool = False
    # fade the intrinsic reward out after the last round, leaving the env reward alone
    # (null: it stays on to the end, as in the paper)
    fade: Fade | None = None
    # the reward is the members' mean less pessimism x their std (0: the mean, as in the
    # paper): the members disagree on states no round saw, where a drifting policy would
    # otherwise be paid for stalling; the refit centres and scales this reward
    pessimism: float = 0.0

    @staticmethod
    def migrate(kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` with the separate keys of saved runs (center_reward,
        center_quantile, center_neutral, fade_updates, fade_after_win) as ``centering``
        and ``fade``."""
        new = dict(kwargs)
        for key, replaced in (("centering", _OLD_CENTERING), ("fade", _OLD_FADE)):
            given = [k for k in replaced if k in new]
            if given and key in new:
                raise ValueError(f"give {key} or the keys it replaces ({', '.join(given)})")
        old = {k: new.pop(k) for k in _OLD_CENTERING + _OLD_FADE if k in new}
        if any(k in old for k in _OLD_CENTERING):
            at, neutral = old.get("center_quantile"), old.get("center_neutral", False)
            if at is not None and neutral:
                raise ValueError("center_quantile and center_neutral both set where to centre")
            if not old.get("center_reward", True):
                if at is not None or neutral:
                    raise ValueError("center_reward: false with a place to centre")
                new["centering"] = "none"
            else:
                new["centering"] = "neutral" if neutral else "mean" if at is None else at
        if any(k in old for k in _OLD_FADE):
            updates, after_win = old.get("fade_updates", 0), old.get("fade_after_win", 0.0)
            fade = {"updates": updates, "after_win": after_win}
            new["fade"] = fade if updates or after_win else None
        return new

    @staticmethod
    def check(cfg: DPMConfig) -> None:
        for key, valid in (
            ("preferences", PREFERENCES),
            ("selection", SELECTIONS),
            ("segments", SEGMENTS),
            ("labeler", LABELERS),
            ("cache_mode", CACHE_MODES),
        ):
            if getattr(cfg, key) not in valid:
                raise ValueError(f"{key}={getattr(cfg, key)!r}; valid choices: {', '.join(valid)}")
        if (cfg.every is None) == (cfg.feedback_every_episodes is None):
            raise ValueError(
                f"give one feedback cadence: every={cfg.every} (learner updates) or "
                f"feedback_every_episodes={cfg.feedback_every_episodes} (episodes); set the "
                "other to null"
            )
        if cfg.fade is not None and cfg.every is None:
            raise ValueError(
                "fade counts learner updates from the last round: it needs the cadence in "
                "updates (every), not feedback_every_episodes"
            )
        for key in ("every", "feedback_every_episodes"):
            if getattr(cfg, key) is not None and getattr(cfg, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(cfg, key)}")
        for key in (
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
        for key in ("rounds", "describe_agents"):
            if getattr(cfg, key) < 0:
                raise ValueError(f"{key} must be >= 0, got {getattr(cfg, key)}")
        if cfg.fade is not None and cfg.fade.updates < 1:
            raise ValueError(f"fade.updates must be >= 1, got {cfg.fade.updates}")
        if cfg.fade is not None and not 0.0 <= cfg.fade.after_win <= 1.0:
            raise ValueError(f"fade.after_win must be in [0, 1], got {cfg.fade.after_win}")
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
        at = cfg.centering
        if not (at in CENTERINGS if isinstance(at, str) else 0.0 <= at <= 1.0):
            raise ValueError(
                f"centering={at!r}; valid choices: {', '.join(CENTERINGS)} or a quantile in [0, 1]"
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

    @property
    def center_quantile(self) -> float | None:
        """The quantile ``centering`` names, or None for mean, neutral and none."""
        return None if isinstance(self.centering, str) else float(self.centering)
