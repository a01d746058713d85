"""The chunked host loop shared by every experiment.

A jitted, seed-vmapped function runs ``log_every`` updates under ``lax.scan``; between
chunks the host writes metrics, checkpoints, the progress bar and wandb. Nothing host
side runs inside the scan. A run folder holds::

    config.yaml     the resolved config
    metrics.csv     one row per update: env steps, per-seed return / win rate, losses, steps/s
    summary.json    final return mean/std over seeds, env steps, wall and compile time
    eval.csv        greedy evaluations (``eval.every`` > 0): one row per evaluation
    feedback.json   the report of each online feedback round (shapers with feedback)
    curve.png       return against env steps, mean and min-max over seeds
    win_curve.png   the same for the win rate, where the env reports wins
    compare/        runs of ``compare_with`` (baselines) with the same seeds, and
    comparison.png  every curve in one plot
    checkpoints/    orbax checkpoints of the whole train state (resume=RUN_DIR continues)

A run over several processes (``jaxmarl_llm.distributed``) has process 0 write these
files; every process saves its shards of the checkpoints.

The modules:

    experiment    run_experiment: a run, then its comparisons; runs reused, resumed or
                  started by folder
    loop          train_in_chunks: set up, train chunk by chunk, write the summary
    host_loop     train_on_host: the same run folder for an algorithm that trains on the
                  host iteration by iteration (a HostTrainer, host_trainer)
    progress      the progress bar
    resume        the run folder and config a run uses: new, resumed, or extended
    checkpoint    orbax checkpoints, restore with a shape check, load_trained
    records       metrics.csv, eval.csv, summary.json and wandb
    evaluation    the greedy evaluation between chunks
    feedback      online feedback rounds between chunks
"""

from jaxmarl_llm.runner.build import make_env
from jaxmarl_llm.runner.checkpoint import (
    TrainedRun,
    checkpoint_manager,
    load_trained,
    restore_checkpoint,
)
from jaxmarl_llm.runner.experiment import (
    finished_summary,
    run_comparisons,
    run_experiment,
    run_into,
)
from jaxmarl_llm.runner.host_trainer import HostTrainer
from jaxmarl_llm.runner.loop import RunResult
from jaxmarl_llm.runner.records import (
    PER_SEED_METRICS,
    MetricsWriter,
    eval_row,
    final_eval,
    final_values,
    metric_rows,
)
from jaxmarl_llm.runner.resume import (
    RESUMABLE_OVERRIDES,
    check_resume_config,
    chunk_lengths,
    default_run_dir,
    extend_budget,
    load_run_config,
)

__all__ = [
    "PER_SEED_METRICS",
    "RESUMABLE_OVERRIDES",
    "HostTrainer",
    "MetricsWriter",
    "RunResult",
    "TrainedRun",
    "check_resume_config",
    "checkpoint_manager",
    "chunk_lengths",
    "default_run_dir",
    "eval_row",
    "extend_budget",
    "final_eval",
    "final_values",
    "finished_summary",
    "load_run_config",
    "load_trained",
    "make_env",
    "metric_rows",
    "restore_checkpoint",
    "run_comparisons",
    "run_experiment",
    "run_into",
]
