"""DPM's experiments on SMAX: the sparse-to-dense claim and the ablations of Fig. 5 and 8.

    python experiments/dpm_figures.py main --maps 3m 2m_vs_1z   # DPM vs QMIX sparse / dense
    python experiments/dpm_figures.py types                     # Fig. 5: both / trajectory / agent
    python experiments/dpm_figures.py selection                 # Fig. 8b: Kendall tau vs random
    python experiments/dpm_figures.py rounds                    # Fig. 8a: 2 / 5 / 10 rounds
    python experiments/dpm_figures.py mixer                     # Fig. 8c: DPM on VDN / QPLEX
    python experiments/dpm_figures.py subset --maps 8m          # Fig. 8d: 4 of 8 allies described
    python experiments/dpm_figures.py zero                      # the intrinsic reward's zero point
    python experiments/dpm_figures.py budget                    # 2M env steps, six DPM seeds
    python experiments/dpm_figures.py pessimism --maps 8m 3m    # the members' std off the reward
    python experiments/dpm_figures.py dual --maps 2m_vs_1z 8m   # Fig. 5, whole episodes, 5 seeds
    python experiments/dpm_figures.py dual_noisy --maps 2m_vs_1z  # ... teacher 20% wrong
    python experiments/dpm_figures.py dual_guarded --maps 8m    # ... with dpm_smax_8m's guards
    python experiments/dpm_figures.py kendall --maps 2m_vs_1z 8m  # Fig. 8b, the same protocol

Every curve is one ``run.py`` run (2 seeds vmapped by default) in ``runs/dpm/<figure>/<map>/``;
a finished run is reused (delete its folder to rerun). Results: ``experiments/results/dpm/``
(``<figure>.md`` table, ``<figure>_<map>.png`` win-rate curves) and the run summaries.
Extra ``key=value`` arguments go to every run (e.g. ``algo.total_timesteps=1000000``).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "experiments" / "results" / "dpm"
FIGURES = (
    "main", "types", "selection", "rounds", "mixer", "subset", "zero", "budget", "pessimism",
    "dual", "dual_noisy", "dual_guarded", "kendall",
)  # fmt: skip
# Fig. 5 and 8b as the paper ran them: whole-episode trajectory queries, candidates from
# enough play that every arm gets all its labels (4,096 steps x 8 envs a round: several
# hundred episodes for at most 300 trajectory candidates), 5 seeds, each arm's labels
# per round equal (150), the budget of the map's main run
EPISODE_QUERIES = [
    "shaping.kwargs.segments=episode",
    "shaping.kwargs.segment_length=101",  # SMAX's longest episode (max_steps 100, + 1)
    "shaping.kwargs.collect_steps=4096",
    "num_seeds=5",
]
# the ten rounds over the first 51k env steps, all within epsilon's annealing (100k), where
# every 20 updates ends them at 205k; chunks of 5 updates, so that rounds fall between them,
# and evaluations and checkpoints at the same updates as the other arms' (every 40 and 100)
EARLY_ROUNDS = ["shaping.kwargs.every=5", "log_every=5", "eval.every=8", "checkpoint_every=20"]
# dual_guarded's control arms, each DPM both with one thing changed: the trajectory queries
# of dpm_smax_8m; the early rounds (which dual_guarded also runs for each preference type)
GUARDED_CONTROLS = {
    "DPM both, 8-step windows": ["shaping.kwargs.segments=window",
                                 "shaping.kwargs.segment_length=8"],
    "DPM both, rounds every 5 updates": EARLY_ROUNDS,
}  # fmt: skip
MAP_BUDGET = {"2m_vs_1z": 500_000}  # env steps; the others 1M (the learner config's)
NOISY_TEACHER = 0.2  # dual_noisy: each answer flipped with this probability
# dual_guarded: dpm_smax_8m's guards against stalling for a fixed ensemble's reward
GUARDS = [
    "shaping.kwargs.centering=neutral",
    "shaping.kwargs.pessimism=1",
    "shaping.kwargs.fade.updates=200",
    "shaping.kwargs.fade.after_win=0.5",
]
# maps where one run per seed is the way to fit in memory: on 8m the whole-episode segment
# features take ~3 GB a seed, and QMIX's replay buffers of 5 seeds outgrow 23 GB
ONE_SEED_PER_RUN = ("8m",)
WIN_TARGETS = (0.5, 0.9)  # "steps to" columns: a midway mark and the paper's target


def _variants(figure: str, smax_map: str) -> list[tuple[str, str, list[str]]]:
    """(label, config, overrides) of every curve of ``figure`` on ``smax_map``."""
    env = [f"env.name=smax:{smax_map}"]
    dpm = ("DPM (QMIX, both, Kendall tau)", "dpm_smax_3m", env)
    if figure == "main":
        return [
            dpm,
            ("QMIX strong sparse", "qmix_smax_3m_strong_sparse", env),
            ("QMIX dense", "qmix_smax_3m_dense", env),
        ]
    if figure == "types":
        return [
            dpm,
            (
                "DPM trajectory only",
                "dpm_smax_3m",
                # 150 comparisons a round need 300 segments: twice the steps collected
                [*env, "shaping.kwargs.preferences=trajectory", "shaping.kwargs.collect_steps=512"],
            ),
            ("DPM agent only", "dpm_smax_3m", [*env, "shaping.kwargs.preferences=agent"]),
        ]
    if figure in ("dual", "dual_noisy", "dual_guarded", "kendall"):
        protocol = [*env, *EPISODE_QUERIES]
        if smax_map in MAP_BUDGET:
            protocol.append(f"algo.total_timesteps={MAP_BUDGET[smax_map]}")
        if figure == "dual_noisy":
            protocol.append(f"shaping.kwargs.mistake={NOISY_TEACHER}")
        if figure == "dual_guarded":
            protocol += GUARDS
        arms = [("DPM both", [])]
        if figure == "kendall":
            arms.append(("DPM random queries", ["shaping.kwargs.selection=random"]))
        else:
            arms += [
                ("DPM trajectory only", ["shaping.kwargs.preferences=trajectory"]),
                ("DPM agent only", ["shaping.kwargs.preferences=agent"]),
            ]
        if figure == "dual_guarded":
            types = arms[1:]
            arms += list(GUARDED_CONTROLS.items())
            arms += [(f"{label}, rounds every 5 updates", [*extra, *EARLY_ROUNDS])
                     for label, extra in types]  # fmt: skip
        # the map's own difficulty: what the learner reaches on the sparse reward alone, at
        # the same budget and seeds
        budget = [o for o in protocol if o.startswith("algo.total_timesteps=")]
        sparse = lambda seeds: ("QMIX strong sparse", "qmix_smax_3m_strong_sparse",
                                [*env, f"num_seeds={seeds}", *budget])  # fmt: skip
        if smax_map not in ONE_SEED_PER_RUN:
            arms = [(label, "dpm_smax_3m", [*protocol, *extra]) for label, extra in arms]
            return arms + ([sparse(5)] if figure == "dual" else [])
        one = [o for o in protocol if not o.startswith("num_seeds=")] + ["num_seeds=1"]
        runs = [(label, "dpm_smax_3m", [*one, *extra]) for label, extra in arms]
        if figure == "dual":
            # and on SMAX's dense reward: whether the learner wins a seed at all when the
            # reward is good, so that a seed no arm wins is told from a reward that fails
            dense = ("QMIX dense", "qmix_smax_3m_dense", [*env, "num_seeds=1", *budget])
            runs += [sparse(1), dense]
        return [
            (f"{label}, seed {k}", config, [*extra, f"seed={k}"])
            for label, config, extra in runs
            for k in range(5)
        ]
    if figure == "selection":
        return [
            dpm,
            ("DPM random queries", "dpm_smax_3m", [*env, "shaping.kwargs.selection=random"]),
        ]
    if figure == "rounds":
        return [
            (f"DPM {r} rounds", "dpm_smax_3m", [*env, f"shaping.kwargs.rounds={r}"]) for r in (2, 5)
        ] + [dpm]
    if figure == "mixer":
        vdn, qplex = [*env, "algo.name=vdn"], [*env, "algo.name=qplex"]
        return [
            dpm,
            ("DPM (VDN)", "dpm_smax_3m", vdn),
            ("DPM (QPLEX)", "dpm_smax_3m", qplex),
            ("VDN strong sparse", "qmix_smax_3m_strong_sparse", vdn),
        ]
    if figure == "subset":
        half = [*env, "shaping.kwargs.describe_agents=4"]
        return [dpm, ("DPM, 4 allies ranked per step", "dpm_smax_3m", half)]
    if figure == "zero":  # not in the paper: where the refit puts the reward's zero
        quiet = [*env, "shaping.kwargs.centering=neutral"]
        return [
            ("DPM, zero at the round's mean, seeds 0-1", "dpm_smax_3m", env),
            ("DPM, zero at the round's quiet steps, seeds 0-1", "dpm_smax_3m", quiet),
            ("DPM, zero at the round's mean, seeds 2-3", "dpm_smax_3m", [*env, "seed=2"]),
            ("DPM, zero at the round's quiet steps, seeds 2-3", "dpm_smax_3m", [*quiet, "seed=2"]),
            ("DPM, zero at the round's mean, seeds 4-5", "dpm_smax_3m", [*env, "seed=4"]),
            ("DPM, zero at the round's quiet steps, seeds 4-5", "dpm_smax_3m", [*quiet, "seed=4"]),
        ]
    if figure == "budget":  # 2M env steps; PyMARL's SMAC config trains 10M (t_max 10,050,000)
        two_m = [*env, "algo.total_timesteps=2000000"]
        quiet = [*two_m, "shaping.kwargs.centering=neutral"]
        as_dpm = [*two_m, "algo.schedule_timesteps=1000000"]
        faded = [*quiet, "algo.schedule_timesteps=1000000", "shaping.kwargs.fade.updates=200"]
        return [
            ("DPM, zero at quiet steps, seeds 0-1", "dpm_smax_3m", quiet),
            ("DPM, zero at quiet steps, seeds 2-3", "dpm_smax_3m", [*quiet, "seed=2"]),
            ("DPM, zero at quiet steps, seeds 4-5", "dpm_smax_3m", [*quiet, "seed=4"]),
            # the intrinsic reward fades out over 200 updates after the last round (0 from
            # 410k env steps): QMIX then learns from the strong sparse reward alone
            ("DPM, quiet zero, faded out, seeds 0-1", "dpm_smax_3m", faded),
            ("DPM, quiet zero, faded out, seeds 2-3", "dpm_smax_3m", [*faded, "seed=2"]),
            ("DPM, quiet zero, faded out, seeds 4-5", "dpm_smax_3m", [*faded, "seed=4"]),
            # the DPM runs were extended from 1M: epsilon anneals over 100k env steps
            ("QMIX strong sparse, DPM's epsilon schedule", "qmix_smax_3m_strong_sparse", as_dpm),
            ("QMIX dense, DPM's epsilon schedule", "qmix_smax_3m_dense", as_dpm),
            # the config's own schedule at 2M: epsilon anneals over 200k env steps
            ("QMIX strong sparse", "qmix_smax_3m_strong_sparse", two_m),
        ]
    if figure == "pessimism":  # not in the paper: the members' std taken off their mean
        quiet = [*env, "shaping.kwargs.centering=neutral"]
        if smax_map == "3m":  # where a 3m seed stalled: 1.5M-2M (budget figure, same runs)
            quiet += ["algo.total_timesteps=2000000", "algo.schedule_timesteps=1000000"]
        pess = [*quiet, "shaping.kwargs.pessimism=1.0"]
        rows = [
            (f"DPM, quiet zero{name}, seeds {s}-{s + 1}", "dpm_smax_3m", [*extra, f"seed={s}"])
            for s in ((0, 2, 4) if smax_map == "3m" else (0, 2))
            for name, extra in (("", quiet), (", pessimism 1", pess))
        ]
        if smax_map != "3m":  # seeds 0-1 against their 1M runs extended to 2M (budget figure)
            pess = [*pess, "algo.total_timesteps=2000000", "algo.schedule_timesteps=1000000"]
            rows += [
                (
                    f"DPM, quiet zero, pessimism 1, 2M, seeds {s}-{s + 1}",
                    "dpm_smax_3m",
                    [*pess, f"seed={s}"],
                )
                for s in (0, 2)
            ]
        # 8m seed 0 stalled for intrinsic reward from 1.05M with pessimism alone
        faded = [*pess, "shaping.kwargs.fade.updates=200"]
        two_m = "" if smax_map == "3m" else " 2M,"
        rows += [
            (
                f"DPM, quiet zero, pessimism 1, faded out,{two_m} seeds {s}-{s + 1}",
                "dpm_smax_3m",
                [*faded, f"seed={s}"],
            )
            for s in (0, 2, 4)
        ]
        # a fixed fade stranded 3m seed 5, which had not won by the last round: each seed's
        # fade starts once it wins half its training episodes in a chunk
        on_win = [*faded, "shaping.kwargs.fade.after_win=0.5"]
        rows += [
            (
                f"DPM, quiet zero, pessimism 1, faded once winning,{two_m} seeds {s}-{s + 1}",
                "dpm_smax_3m",
                [*on_win, f"seed={s}"],
            )
            for s in (0, 2, 4)
        ]
        if smax_map != "3m":
            # 8m at 2M: 0.87 with per-seed fading; does a larger budget lift it? (the runs
            # here were the 2M runs' folders copied and extended; a fresh start gives the
            # same run: the schedules stay fixed at 1M env steps)
            on_win_no_budget = [o for o in on_win if not o.startswith("algo.")]
            two_m_budget = ["algo.total_timesteps=2000000", "algo.schedule_timesteps=1000000"]
            three_m = ["algo.total_timesteps=3000000", "algo.schedule_timesteps=1000000"]
            rows += [
                (
                    f"DPM, quiet zero, pessimism 1, faded once winning, 3M, seeds {s}-{s + 1}",
                    "dpm_smax_3m",
                    [*on_win_no_budget, *three_m, f"seed={s}"],
                )
                for s in (0, 2, 4)
            ]
            # the dense reference at the same budget and schedules
            rows.append(("QMIX dense, 3M, seeds 0-1", "qmix_smax_3m_dense", [*env, *three_m]))
            # 8m at 2M plateaus near 0.85 from 1M, dense QMIX too (0.81)
            rows += [
                (
                    f"DPM, quiet zero, pessimism 1, faded out, 2M, lr to 0, seeds {s}-{s + 1}",
                    "dpm_smax_3m",
                    [*faded, "algo.lr_linear_decay=true", f"seed={s}"],
                )
                for s in (0, 2)
            ]

            def learner_pair(lever: str, extra: list[str]) -> list[tuple]:
                """DPM (seed 0 of the best 8m row) and dense QMIX, both changed by ``extra``."""
                return [
                    (
                        f"DPM, quiet zero, pessimism 1, faded once winning, 2M, {lever}, seeds 0-1",
                        "dpm_smax_3m",
                        [*on_win_no_budget, *extra, *two_m_budget, "seed=0"],
                    ),
                    (
                        f"QMIX dense, 2M, {lever}, seeds 0-1",
                        "qmix_smax_3m_dense",
                        [*env, *extra, *two_m_budget],
                    ),
                ]

            # the plateau is QMIX's (dense 0.88 at 3M): PyMARL2's learning rate, 1e-3 in place
            # of JaxMARL's 5e-3 (a batch of 128 episodes, PyMARL2's other half, runs 3x
            # slower here); one pair: its seed 0 never won, so no more were run
            rows += learner_pair("lr 1e-3", ["algo.lr=0.001"])
            # nor does PyMARL2's batch of 128 (GPU run, every seed stalled): a wider agent
            # network, GRU 128 in place of 64, for both
            rows += learner_pair("GRU 128", ["algo.hidden_dim=128"])
            # nor does GRU 128: twice the gradient steps per update (8 in place of 4, at
            # lr 5e-3), which brings the transitions replayed per env step to PyMARL's
            # (one batch of 32 episodes per episode collected)
            rows += learner_pair("8 updates", ["algo.updates_per_rollout=8"])
            # the world state the mixer (and DPM's reward model) reads, with SMAC's scales
            # in place of jaxmarl's raw map positions (0..32) and cooldowns in seconds
            rows += learner_pair("normalized state", ["env.kwargs.world_state=normalized"])
        return rows
    raise ValueError(f"unknown figure {figure!r}; valid: {', '.join(FIGURES)}")


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in label.lower()).strip("_")


def _steps_to(run_dir: Path, target: float, window: int = 10) -> int | None:
    """First env step at which the seeds' mean win rate, averaged over the last
    ``window`` logged updates (one update's few dozen episodes are noisy), reaches ``target``."""
    import numpy as np

    from jaxmarl_llm.plotting import load_metrics, seed_columns

    header, data = load_metrics(run_dir / "metrics.csv")
    cols = seed_columns(header, "win_rate")
    mean = np.nan_to_num(np.nanmean(np.stack([data[c] for c in cols], 1), 1))
    rolling = np.convolve(mean, np.ones(window) / window)[: mean.size]
    hit = np.nonzero(rolling >= target)[0]
    return int(data["env_steps"][hit[0]]) if hit.size else None


def _test_win_rates(run_dir: Path):
    """``(env_steps [K], win rates [K, seeds])`` of the greedy test episodes in
    ``eval.csv``, or None for a run made without them."""
    import numpy as np

    from jaxmarl_llm.plotting import load_metrics, seed_columns

    if not (run_dir / "eval.csv").exists():
        return None
    header, data = load_metrics(run_dir / "eval.csv")
    rates = np.stack([data[c] for c in seed_columns(header, "eval_win_rate")], 1)
    return data["env_steps"], rates


def _eval_steps_to(run_dir: Path, target: float, window: int = 2) -> int | None:
    """First env step at which the seeds' mean greedy test win rate (``eval.csv``),
    averaged over the last ``window`` evaluations, reaches ``target``."""
    import numpy as np

    if (tested := _test_win_rates(run_dir)) is None:
        return None
    steps, rates = tested
    mean = np.nan_to_num(np.nanmean(rates, 1))
    rolling = np.array([mean[max(0, i - window + 1) : i + 1].mean() for i in range(mean.size)])
    hit = np.nonzero(rolling >= target)[0]
    return int(steps[hit[0]]) if hit.size else None


def _eval_means(run_dir: Path, last: int = 5) -> dict:
    """The seeds' greedy test win rate averaged over the last ``last`` evaluations and over
    all of them (the area under the test curve): steadier than the final evaluation."""
    import numpy as np

    if (tested := _test_win_rates(run_dir)) is None:
        return {}
    rates = tested[1]
    return {
        "test_win_rate_last5": float(np.nanmean(rates[-last:])),
        "test_win_rate_all": float(np.nanmean(rates)),
        "test_win_rate_all_per_seed": [float(x) for x in np.nanmean(rates, 0)],
    }


def _feedback_summary(run_dir: Path) -> dict:
    path = run_dir / "feedback.json"
    if not path.exists():
        return {}
    rounds = json.loads(path.read_text())
    last = rounds[max(rounds, key=int)]
    # over the seeds with a value: a seed whose labels were all ties has no agreement (NaN)
    mean = lambda xs: float(np.nanmean(xs)) if np.isfinite(xs).any() else float("nan")
    out = {
        "rounds": len(rounds),
        "labels_per_seed": last["labels_total_per_seed"],
        # the fewest valid candidates a round offered, per kind (min over rounds and seeds)
        "min_candidates": {
            kind: min(min(r["candidates"][kind]) for r in rounds.values())
            for kind in ("trajectory", "agent")
            if all("candidates" in r for r in rounds.values())
        },
        "pearson_dense": mean(last["pearson_dense"]),
    }
    for kind in ("trajectory", "agent"):
        # random unseen queries after the last refit (older runs: the selected ones before it)
        for key in (f"eval_{kind}_agreement", f"heldout_{kind}_agreement"):
            if key in last:
                out[f"heldout_{kind}"] = mean(last[key])
                out[f"heldout_{kind}_kind"] = key.split("_")[0]
                break
    return out


def run_figure(
    figure: str,
    maps: list[str],
    overrides: list[str],
    quiet: bool,
    only: str | None = None,
    report: bool = False,
) -> list[dict]:
    from jaxmarl_llm.plotting import plot_runs
    from jaxmarl_llm.runner import finished_summary, run_into
    from jaxmarl_llm.runner.records import training_wall_s

    rows = []
    for smax_map in maps:
        dirs = {}
        variants = _variants(figure, smax_map)
        for label, config, extra in variants:
            out = ROOT / "runs" / "dpm" / figure / smax_map / _slug(label)
            common = ["compare_with=[]", f"progress={not quiet}", *extra, *overrides]
            if report or (only and only.lower() not in label.lower()):
                if finished_summary(config, common, out) is None:
                    continue  # --only: run just the matching variants, report the finished ones
            note = f"[{figure}/{smax_map}] {label}: {config} {' '.join(extra)}"
            summary = run_into(config, common, out, note)
            dirs[label] = out
            command = " ".join(["python experiments/run.py", config, *extra, *overrides])
            rows.append(
                {
                    "figure": figure,
                    "map": smax_map,
                    "variant": label,
                    "command": command,
                    "win_rate_mean": summary.get("final_win_rate_mean"),
                    "win_rate_per_seed": summary.get("final_win_rate_per_seed"),
                    "steps_to": {str(t): _steps_to(out, t) for t in WIN_TARGETS},
                    "test_win_rate_mean": summary.get("final_eval_win_rate_mean"),
                    "test_win_rate_per_seed": summary.get("final_eval_win_rate_per_seed"),
                    "test_steps_to": {str(t): _eval_steps_to(out, t) for t in WIN_TARGETS},
                    "env_steps": summary["env_steps"],
                    "wall_s": training_wall_s(out / "metrics.csv", summary),
                    "commit": summary.get("commit"),
                    "env_steps_per_s": summary["env_steps_per_s"],
                    "feedback_s": summary.get("feedback_s", 0.0),
                    **_eval_means(out),
                    **_feedback_summary(out),
                }
            )
            dest = RESULTS / figure / smax_map / _slug(label)
            dest.mkdir(parents=True, exist_ok=True)
            for name in (
                "summary.json",
                "config.yaml",
                "curve.png",
                "feedback.json",
                "eval.csv",
                "dpm/fade_starts.json",  # fade.after_win: when each seed's fade began
                "intrinsic_check.jsonl",  # dpm_intrinsic_check.py's output, where it was run
            ):
                if (out / name).exists():
                    shutil.copy(out / name, dest / Path(name).name)
        every_run = len(dirs) == len(variants)
        # a figure with runs missing here (--only on a fresh checkout) gets its own file, so
        # the committed figure with every curve is kept
        partial = "finished" if report else only or "partial"
        plot = f"{figure}_{smax_map}" + ("" if every_run else f"_{_slug(partial)}")
        if (
            only and not report and not every_run
        ):  # the table reports every finished run; the plot, --only's
            dirs = {k: v for k, v in dirs.items() if only.lower() in k.lower()} or dirs
        if smax_map in ONE_SEED_PER_RUN:  # one curve per arm, its seeds' runs pooled
            dirs = by_arm(dirs)
            plot_arms(figure, smax_map, variants)
        plot_runs(
            dirs, RESULTS / f"{plot}.png", title=f"DPM {figure}: smax:{smax_map}", metric="win_rate"
        )
    previous = RESULTS / f"{figure}.json"
    if previous.exists():
        from jaxmarl_llm.runner.provenance import stamp_kept_rows

        rows = merge_rows(stamp_kept_rows(json.loads(previous.read_text()), previous), rows, figure)
    RESULTS.mkdir(parents=True, exist_ok=True)
    previous.write_text(json.dumps(rows, indent=2))
    (RESULTS / f"{figure}.md").write_text(markdown_table(rows))
    print(markdown_table(rows))
    return rows


def plot_arms(figure: str, smax_map: str, variants: list) -> Path | None:
    """``<figure>_<map>_arms.png``: each arm's greedy test win rate, its seeds pooled, from
    the stored records of every finished run (``results/dpm/<figure>/<map>/*/eval.csv``),
    so the figure holds the runs of earlier processes too; None where none is stored."""
    from jaxmarl_llm.plotting import plot_runs

    stored = {label: RESULTS / figure / smax_map / _slug(label) for label, _, _ in variants}
    stored = {k: v for k, v in stored.items() if (v / "eval.csv").exists()}
    if not stored:
        return None
    out = RESULTS / f"{figure}_{smax_map}_arms.png"
    title = f"DPM {figure}: smax:{smax_map}, greedy test win (mean, min-max over seeds)"
    return plot_runs(by_arm(stored), out, metric="eval_win_rate", title=title)


def arm_of(label: str) -> str | None:
    """The arm of a variant run one seed per run (``"<arm>, seed K"``); None for others."""
    arm, sep, _ = label.rpartition(", seed ")
    return arm if sep else None


def by_arm(dirs: dict[str, Path]) -> dict[str, list[Path]]:
    """Run folders of variants ``"<arm>, seed K"`` grouped by arm (others alone)."""
    arms: dict[str, list[Path]] = {}
    for label, folder in dirs.items():
        arms.setdefault(arm_of(label) or label, []).append(folder)
    return arms


def merge_rows(previous: list[dict], rows: list[dict], figure: str) -> list[dict]:
    """This call's rows, plus the earlier rows of every variant it did not run (other maps,
    or variants skipped by --only whose runs are not here), in the figure's order. Rows of
    variants the figure no longer lists (or does not list yet: another process running
    older code) are kept, after the listed ones of their map."""
    fresh = {(r["map"], r["variant"]) for r in rows}
    merged = [r for r in previous if (r["map"], r["variant"]) not in fresh] + rows
    maps = list(dict.fromkeys(r["map"] for r in merged))
    order = {
        (smax_map, label): i
        for smax_map in maps
        for i, (label, _, _) in enumerate(_variants(figure, smax_map))
    }
    unlisted = len(order)  # sorted() is stable: unlisted rows keep their earlier order
    return sorted(
        merged,
        key=lambda r: (maps.index(r["map"]), order.get((r["map"], r["variant"]), unlisted)),
    )


def markdown_table(rows: list[dict]) -> str:
    tested = any(r.get("test_win_rate_mean") is not None for r in rows)
    test_head = (
        "| greedy test win rate (per seed) | last 5 / all evaluations | test steps to 0.5 / 0.9 "
        if tested
        else ""
    )
    head = (
        "| map | variant | final win rate (per seed) | steps to 0.5 / 0.9 "
        + test_head
        + "| held-out agreement traj. / agent | Pearson r_hat vs dense | env steps | steps/s "
        "| feedback s |\n|---|---|---|---|---|---|---|---|---|"
        + ("---|---|---|" if tested else "")
        + "\n"
    )
    fmt = lambda x: "" if x is None else f"{x:.2f}"
    # NaN agreement: every held-out query of that kind was a tie, so there is nothing to agree on
    ties = lambda x: x is not None and np.isnan(x)
    agreement = lambda x: "ties" if ties(x) else fmt(x)
    per_seed = lambda ws: ", ".join(f"{w:.2f}" for w in ws or [])
    reached = lambda d: " / ".join(f"{v:,}" if v is not None else "not reached" for v in d.values())
    lines = []
    for r in rows:
        seeds = per_seed(r["win_rate_per_seed"])
        steps = reached(r["steps_to"])
        if tested:
            if r.get("test_win_rate_mean") is None:  # a run made without test episodes
                steps += " |  |  | "
            else:
                test_seeds = per_seed(r.get("test_win_rate_per_seed"))
                test_steps = reached(r["test_steps_to"])
                means = f"{fmt(r.get('test_win_rate_last5'))} / {fmt(r.get('test_win_rate_all'))}"
                steps += (
                    f" | {fmt(r['test_win_rate_mean'])} ({test_seeds}) | {means} | {test_steps}"
                )
        agree = (
            f"{agreement(r.get('heldout_trajectory'))} / {agreement(r.get('heldout_agent'))}"
            if "rounds" in r
            else ""
        )
        lines.append(
            f"| {r['map']} | {r['variant']} | {fmt(r['win_rate_mean'])} ({seeds}) | {steps} "
            f"| {agree} | {fmt(r.get('pearson_dense'))} | {r['env_steps']:,} "
            f"| {r['env_steps_per_s']:,.0f} | {r['feedback_s']:.0f} |"
        )
    notes = (
        "\nHeld-out agreement: the last refit's model on random unseen queries; "
        "'ties' where every such query was a tie.\n"
        if any(ties(r.get(k)) for r in rows for k in ("heldout_trajectory", "heldout_agent"))
        else ""
    )
    return head + "\n".join(lines) + "\n" + notes + arms_table(rows)


def arms_table(rows: list[dict]) -> str:
    """Per arm of a map run one seed per run (variants ``"<arm>, seed K"``), its seeds'
    greedy test win at the end and over all evaluations (the area under the test curve,
    as a mean), and how many seeds end above 0.5; "" where no such rows have test wins."""
    arms: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        arm = arm_of(r["variant"])
        if arm is not None and r.get("test_win_rate_mean") is not None:
            arms.setdefault((r["map"], arm), []).append(r)
    if not arms:
        return ""
    lines = [
        "\nPer arm (one run per seed): greedy test win rate at the end and its mean over all "
        "evaluations, over the arm's seeds.\n",
        "| map | arm | seeds | test win at the end (per seed) | seeds above 0.5 "
        "| mean over all evaluations (per seed) |",
        "|---|---|---|---|---|---|",
    ]
    for (smax_map, arm), runs in arms.items():
        end = [r["test_win_rate_mean"] for r in runs]
        auc = [r.get("test_win_rate_all") for r in runs]
        seeds = lambda xs: ", ".join("" if x is None else f"{x:.2f}" for x in xs)
        mean = lambda xs: "" if None in xs else f"{np.mean(xs):.2f}"
        above = sum(x > 0.5 for x in end)
        lines.append(
            f"| {smax_map} | {arm} | {len(runs)} | {mean(end)} ({seeds(end)}) | {above} of "
            f"{len(runs)} | {mean(auc)} ({seeds(auc)}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("figure", choices=FIGURES)
    p.add_argument("--maps", nargs="+", default=None, help="SMAX maps (default: 3m; subset: 8m)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--only", default=None, help="run only the variants whose label has this text")
    p.add_argument(
        "--report", action="store_true", help="train nothing: tabulate and plot the finished runs"
    )
    p.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = p.parse_intermixed_args(argv)  # overrides may follow --only etc.
    # run_into names each run it trains at INFO on the jaxmarl_llm logger
    logging.basicConfig(format="%(message)s", stream=sys.stdout)
    logging.getLogger("jaxmarl_llm").setLevel(logging.INFO)
    maps = args.maps or (["8m"] if args.figure == "subset" else ["3m"])
    run_figure(args.figure, maps, args.overrides, args.quiet, args.only, args.report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
