"""What V-GEPF's CLIP potential says about the play of trained football policies.

    python experiments/vgepf_potential_check.py VGEPF_RUN [POLICY_RUN ...] [--steps 200]

``VGEPF_RUN`` is a V-GEPF run: its CLIP and its skill pool make the potential. Each policy
run (default: ``VGEPF_RUN`` and the runs in its ``compare/`` folder) restores its latest
checkpoint and plays its sampling policy, as it trained, for ``--steps`` steps from each
seed's env states. Per policy and per skill, over the states played (each seed's states
pooled):

* ``corr_predicate``: Pearson correlation of the skill's cosine with the skill's own
  predicate score (``predicates.py``, the captions the CLIP was trained on): whether the
  CLIP sees the skill on this policy's frames;
* ``corr_ball_x``: correlation of the cosine with the ball's x (1 is red's goal): whether
  the potential pays carrying the ball forward; ``predicate_corr_ball_x`` the same of the
  predicate score (the skill as defined, without the CLIP) and ``predicate_holds`` the
  share of states where the predicate holds; ``..._owned``: the same over the states where
  a blue player owns the ball (a carry forward, not a shot in flight);
* ``auc_won``: over the episodes that ended inside the window, the probability that a won
  episode's last state has a higher cosine than an episode that was not won (0.5: the
  potential cannot tell them apart);
* ``rise_won`` / ``rise_lost``: the cosine at an episode's last state minus at its first
  (episodes that start and end inside the window), in standard deviations of the cosine
  over all the states played: what ``gamma * phi(s') - phi(s)`` pays along an episode
  before its last step takes ``phi`` back to 0;
* ``end_pay``: ``-phi`` of the last state of the episodes that ended, ``phi`` normalised
  as below (the mean over them): what ending an episode pays, as ``phi`` of the end is 0;
* ``shaping_std``: the standard deviation of ``gamma * phi(s') - phi(s)`` per step, with
  ``phi`` the cosine normalised on these states (as a selection round normalises it), at
  rho = 1; beside the env reward's per step (``env_reward_std``) it says how much of the
  reward PPO's normalised advantages see is the potential's;
* ``raw_end_pay`` and ``raw_shaping_std``: the same two with ``phi`` the raw cosine, as
  eq. 2 defines it and a run with ``normalise: false`` trains on it.

Also the skills the V-GEPF run's selection rounds chose, per round and seed
(``feedback.json``; the last is the one it trains with). Writes ``--out`` (default
``VGEPF_RUN/potential_check.json``) and prints the main columns as a table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def auc(pos, neg) -> float | None:
    """P(a random ``pos`` value > a random ``neg`` value), ties counted half (None if
    either side is empty)."""
    import numpy as np

    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if pos.size == 0 or neg.size == 0:
        return None
    diff = pos[:, None] - neg[None, :]
    return float((diff > 0).mean() + 0.5 * (diff == 0).mean())


def correlation(x, y) -> float | None:
    """Pearson correlation (None where either side is constant or has under 2 values)."""
    import numpy as np

    x, y = np.asarray(x, float).ravel(), np.asarray(y, float).ravel()
    if x.size < 2 or x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def episodes(done, won):
    """Episodes inside a window of one env: ``done`` and ``won`` ``[T]`` (the step that
    ended an episode, whether it was won). Returns one ``(first, last, won)`` per episode:
    its first step is the step after an end (None where it began before the window) and
    its last step is the step that ended it."""
    ends = [t for t in range(len(done)) if done[t]]
    out = []
    for i, t in enumerate(ends):
        first = ends[i - 1] + 1 if i > 0 else None
        out.append((first, t, bool(won[t])))
    return out


def shaping_rewards(phi, done, gamma: float):
    """The shaper's ``gamma * phi(s') - phi(s)`` (``shaper.potential_difference``)
    ``[S, T - 1, E]`` along steps ``[S, T, E]`` of play; the state after an episode's end
    is the next episode's, so ``phi(s')`` there is the end's 0."""
    import numpy as np

    from jaxmarl_llm.shaper import potential_difference

    now = phi[:, :-1]
    f = potential_difference(gamma, done[:, :-1], now, phi[:, 1:], now[..., None])  # one agent
    return np.asarray(f)[..., 0]


def skill_stats(cos, pred, ball_x, owned, done, won, gamma: float) -> dict:
    """The statistics of one skill's cosines ``cos`` ``[S, T, E]`` (seeds, steps, envs),
    with the skill's predicate scores, the ball's x, whether blue owns the ball, and the
    end and win flags alike."""
    import numpy as np

    scale = float(cos.std()) or 1.0
    phi = (cos - cos.mean()) / scale  # normalised on this play, as a round does
    last_won, last_lost, rise_won, rise_lost = [], [], [], []
    for s in range(cos.shape[0]):
        for e in range(cos.shape[2]):
            for first, last, w in episodes(done[s, :, e], won[s, :, e]):
                (last_won if w else last_lost).append(cos[s, last, e])
                if first is not None:
                    rise = (cos[s, last, e] - cos[s, first, e]) / scale
                    (rise_won if w else rise_lost).append(rise)

    def mean(x):
        return float(np.mean(x)) if len(x) else None

    ends = np.r_[last_won, last_lost]  # the cosine at every ended episode's last state

    return {
        "corr_predicate": correlation(cos, pred),
        "corr_ball_x": correlation(cos, ball_x),
        "corr_ball_x_owned": correlation(cos[owned], ball_x[owned]),
        "predicate_corr_ball_x": correlation(pred, ball_x),
        "predicate_corr_ball_x_owned": correlation(pred[owned], ball_x[owned]),
        "predicate_holds": float((pred > 0).mean()),
        "auc_won": auc(last_won, last_lost),
        "end_pay": float(-np.mean((ends - cos.mean()) / scale)) if ends.size else None,
        "rise_won": mean(rise_won),
        "rise_lost": mean(rise_lost),
        "shaping_std": float(shaping_rewards(phi, done, gamma).std()),
        # what a run on the raw cosine (eq. 2) pays: phi = cos
        "raw_end_pay": float(-ends.mean()) if ends.size else None,
        "raw_shaping_std": float(shaping_rewards(cos, done, gamma).std()),
        "cos_mean": float(cos.mean()),
        "cos_std": float(cos.std()),
    }


def played(run_dir: Path, steps: int, seed: int):
    """The states, ends, wins and team rewards of ``steps`` steps of a run's sampling
    policy, per seed: ``(states with leaves [S, T, E, ...], done, won and reward
    [S, T, E], env steps)``."""
    import jax
    import numpy as np

    from jaxmarl_llm.runner import load_trained

    run = load_trained(run_dir)
    keys = jax.random.split(jax.random.PRNGKey(seed), run.cfg.num_seeds)
    batch = jax.jit(jax.vmap(lambda s, k: run.learner.collect(s, k, steps)))(run.state, keys)
    score = np.asarray(batch.next_state.score)  # [S, T, E, 2], the ended episode's score
    done = np.asarray(batch.done).astype(bool)
    won = done & (score[..., 0] > score[..., 1])
    states = jax.device_get(batch.state)
    reward = np.asarray(batch.reward).mean(-1)  # env reward, the agents' mean
    return states, done, won, reward, run.updates * run.learner.env_steps_per_update


def check(vgepf_run: Path, policy_runs: list[Path], steps: int, seed: int) -> dict:
    import jax
    import numpy as np

    from jaxmarl_llm.methods.vgepf.clip_model import load_vgepf_clip
    from jaxmarl_llm.methods.vgepf.online import embed_states
    from jaxmarl_llm.methods.vgepf.potential import image_embeddings, image_params, text_embedding
    from jaxmarl_llm.methods.vgepf.predicates import skill_predicates
    from jaxmarl_llm.methods.vgepf.skills import SKILL_NAMES
    from jaxmarl_llm.runner.resume import load_run_config

    cfg = load_run_config(vgepf_run)
    if cfg.shaping.name != "vgepf":
        raise SystemExit(f"{vgepf_run} is not a V-GEPF run (shaping.name={cfg.shaping.name})")
    kwargs = cfg.shaping.kwargs
    clip = load_vgepf_clip({"clip_weights": kwargs.get("clip_weights")})
    size = int(kwargs.get("image_size") or clip.config.image_size)
    gamma = float(kwargs.get("gamma", 0.995))
    image = image_params(clip.params)
    embed = jax.jit(lambda s: image_embeddings(clip.config, image, s, size))
    texts = np.stack([text_embedding(clip, name) for name in SKILL_NAMES])  # [K, D]
    predicates = jax.jit(jax.vmap(skill_predicates))

    out = {"vgepf_run": str(vgepf_run), "steps": steps, "seed": seed}
    feedback = vgepf_run / "feedback.json"
    if feedback.exists():
        rounds = json.loads(feedback.read_text())
        order = sorted(rounds, key=int)
        out["chosen_skills"] = {k: rounds[k]["skill"] for k in order}
    out["policies"] = {}
    for run_dir in policy_runs:
        states, done, won, reward, env_steps = played(run_dir, steps, seed)
        lead = done.shape  # [S, T, E]
        flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[3:]), states)
        cos = (embed_states(embed, flat) @ texts.T).reshape(*lead, -1)  # [S, T, E, K]
        _, pred = (np.asarray(x) for x in predicates(flat))
        pred = pred.reshape(*lead, -1)
        ball_x = np.asarray(states.ball)[..., 0]
        owner = np.asarray(states.owner)
        owned = (owner >= 0) & (owner < 11)  # blue players are 0..10
        ended = done.sum()
        out["policies"][run_dir.name] = {
            "run": str(run_dir),
            "env_steps": int(env_steps),
            "episodes_ended": int(ended),
            "won_rate": float(won.sum() / max(ended, 1)),
            "env_reward_std": float(reward.std()),
            "skills": {
                name: skill_stats(cos[..., k], pred[..., k], ball_x, owned, done, won, gamma)
                for k, name in enumerate(SKILL_NAMES)
            },
        }
    return out


COLUMNS = (
    ("corr_predicate", "cos ~ predicate"),
    ("corr_ball_x_owned", "cos ~ ball x, owned"),
    ("predicate_corr_ball_x_owned", "predicate ~ ball x, owned"),
    ("predicate_holds", "predicate holds"),
    ("auc_won", "AUC won vs not, last state"),
    ("rise_won", "rise, won"),
    ("rise_lost", "rise, not won"),
    ("end_pay", "end pays"),
    ("shaping_std", "F std per step"),
)


def table(result: dict) -> str:
    """The check as a markdown table: one row per policy and skill."""

    def cell(x):
        return "-" if x is None else f"{x:.2f}"

    head = "| policy | skill | " + " | ".join(t for _, t in COLUMNS) + " |\n"
    head += "|---|---|" + "---|" * len(COLUMNS) + "\n"
    rows = []
    for name, policy in result["policies"].items():
        label = (
            f"{name} ({policy['env_steps']:,} steps, won {policy['won_rate']:.2f}, "
            f"env reward std {policy['env_reward_std']:.3f})"
        )
        for skill_name, stats in policy["skills"].items():
            cells = " | ".join(cell(stats[k]) for k, _ in COLUMNS)
            rows.append(f"| {label} | {skill_name} | {cells} |")
    return head + "\n".join(rows) + "\n"


def default_policies(vgepf_run: Path) -> list[Path]:
    compare = vgepf_run / "compare"
    others = sorted(p for p in compare.iterdir() if p.is_dir()) if compare.is_dir() else []
    return [vgepf_run, *others]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("vgepf_run", type=Path)
    p.add_argument("policy_runs", type=Path, nargs="*")
    p.add_argument("--steps", type=int, default=200, help="steps per env and seed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    result = check(
        args.vgepf_run, args.policy_runs or default_policies(args.vgepf_run), args.steps, args.seed
    )
    out = args.out or args.vgepf_run / "potential_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(table(result))
    if "chosen_skills" in result:
        print("skills chosen per round (per seed):", json.dumps(result["chosen_skills"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
