"""The progress bar of a run in env steps."""

from __future__ import annotations

from omegaconf import DictConfig

from jaxmarl_llm.distributed import is_primary
from jaxmarl_llm.runner.records import is_nan


class Progress:
    """The progress bar in env steps, showing the latest return, steps/s, win rate and
    greedy evaluation return."""

    def __init__(self, cfg: DictConfig, total_updates: int, steps_per_update: int, done: int):
        from tqdm.auto import tqdm

        self.steps_per_update = steps_per_update
        self.last_return = float("nan")
        self.bar = tqdm(
            total=total_updates * steps_per_update,
            initial=done * steps_per_update,
            unit="step",
            unit_scale=True,
            disable=not (cfg.progress and is_primary()),
            dynamic_ncols=True,
            desc="train",
        )

    def update(self, n: int, rows: list[dict], evaluation: dict | None) -> None:
        returns = [r["episode_return"] for r in rows if not is_nan(r.get("episode_return"))]
        if returns:
            self.last_return = returns[-1]
        postfix = {"return": f"{self.last_return:.3g}", "sps": f"{rows[-1]['steps_per_s']:,.0f}"}
        if "win_rate" in rows[-1] and not is_nan(rows[-1]["win_rate"]):
            postfix["win"] = f"{rows[-1]['win_rate']:.2f}"
        if evaluation is not None:
            postfix["eval"] = f"{evaluation['eval_return']:.3g}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(n * self.steps_per_update)

    def close(self) -> None:
        self.bar.close()
