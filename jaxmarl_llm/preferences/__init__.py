"""Preference learning: datasets of teacher labels, Bradley-Terry losses, reward-model
ensembles, a jitted trainer, query selection and evaluation (LCA, DPM).

Typical use (LCA: per-agent state-pair rankings -> potential-difference rewards)::

    from jaxmarl_llm import preferences as prefs

    conf, n = teachers.repeated_pair_preferences(key, v_a, v_b, noise, num_queries=4)
    data = prefs.state_pairs_from_confidence(obs_a, obs_b, conf, n, capacity=4096)
    model = prefs.RewardModel(hidden=(64, 64), ensemble_size=3)
    params = model.init(key, obs_a.shape[-1])
    params, losses = prefs.fit(model, params, data, key, prefs.FitConfig(num_steps=500))
    reward = model.potential_difference(params, obs, next_obs)  # [..., N]
"""

from jaxmarl_llm.preferences.datasets import (
    AgentRankingDataset,
    SegmentPairDataset,
    StatePairDataset,
    agent_ranking_dataset,
    insert,
    num_valid,
    pad_to_capacity,
    per_agent_state_pairs,
    segment_pairs,
    state_pairs,
    state_pairs_from_confidence,
    state_pairs_from_labels,
    take,
    train_val_split,
)
from jaxmarl_llm.preferences.evaluation import (
    kendall_tau,
    pairwise_ranking_accuracy,
    preference_accuracy,
    spearman,
)
from jaxmarl_llm.preferences.losses import (
    agent_ranking_loss,
    bradley_terry_cross_entropy,
    preference_probability,
    segment_pair_loss,
    state_pair_loss,
)
from jaxmarl_llm.preferences.models import RewardModel, ScoreMLP
from jaxmarl_llm.preferences.selection import (
    ensemble_rank_consensus,
    linear_schedule,
    preference_disagreement,
    select_below_threshold,
    select_mixed,
    select_top_k,
    select_uniform,
    trajectory_consensus,
)
from jaxmarl_llm.preferences.train import FitConfig, dataset_loss, ensemble_loss, fit

__all__ = [
    "AgentRankingDataset",
    "FitConfig",
    "RewardModel",
    "ScoreMLP",
    "SegmentPairDataset",
    "StatePairDataset",
    "agent_ranking_loss",
    "agent_ranking_dataset",
    "bradley_terry_cross_entropy",
    "dataset_loss",
    "ensemble_loss",
    "ensemble_rank_consensus",
    "fit",
    "insert",
    "kendall_tau",
    "linear_schedule",
    "num_valid",
    "pad_to_capacity",
    "pairwise_ranking_accuracy",
    "per_agent_state_pairs",
    "preference_accuracy",
    "preference_disagreement",
    "preference_probability",
    "segment_pair_loss",
    "segment_pairs",
    "select_below_threshold",
    "select_mixed",
    "select_top_k",
    "select_uniform",
    "spearman",
    "state_pair_loss",
    "state_pairs",
    "state_pairs_from_confidence",
    "state_pairs_from_labels",
    "take",
    "train_val_split",
    "trajectory_consensus",
]
