"""Expected Threat of our football env: ``python experiments/xt_grid.py``.

Plays ``--episodes`` full matches of each ``--scenario`` (left team: the scripted intent
with ``--epsilon`` random actions, right team: scripted; ``jaxmarl_llm.methods.xt.collect``),
counts both teams' moves, shots and goals on the 21 x 15 zone grid, iterates the paper's
eq. 24 to convergence and writes the grid with how it was made (the ``xt`` shaper's
default grid, ``jaxmarl_llm/methods/xt/football_xt_21x15.json``) and a heatmap PNG.
The defaults take about a minute on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ("11_vs_11_easy_stochastic", "11_vs_11_hard_stochastic")
PENALTY_SPOT = (0.79, 0.0)  # 11 m from the goal line on a 105 m pitch (x spans 2.0)
CENTRE_SPOT = (0.0, 0.0)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--scenario", action="append", help=f"repeatable; default: {' '.join(SCENARIOS)}"
    )
    p.add_argument("--episodes", type=int, default=192, help="matches per scenario")
    p.add_argument(
        "--steps", type=int, default=None, help="steps per match (default: the scenario's)"
    )
    p.add_argument("--epsilon", type=float, default=0.2, help="random-action rate of the left team")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tol", type=float, default=None, help="convergence tolerance of eq. 24")
    p.add_argument("--max-iterations", type=int, default=None)
    p.add_argument("--out", type=Path, default=None, help="grid JSON (default: the packaged one)")
    p.add_argument("--png", type=Path, default=ROOT / "experiments/results/vgepf/xt_grid.png")
    return p.parse_args(argv)


def zone_value(grid, xy) -> float:
    import jax.numpy as jnp

    from jaxmarl_llm.methods.xt.grid import zone_index

    return float(grid.reshape(-1)[int(zone_index(jnp.asarray(xy, jnp.float32)))])


def plot_grid(grid, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jaxmarl_llm.methods.xt.grid import PITCH_X, PITCH_Y

    fig, ax = plt.subplots(figsize=(10, 4.6))
    # row 0 is y = -PITCH_Y, GRF's top: drawn at the top
    im = ax.imshow(grid, cmap="viridis", extent=(-PITCH_X, PITCH_X, PITCH_Y, -PITCH_Y))
    ny, nx = grid.shape
    for iy in range(ny):
        for ix in range(nx):
            x = -PITCH_X + (ix + 0.5) * 2 * PITCH_X / nx
            y = -PITCH_Y + (iy + 0.5) * 2 * PITCH_Y / ny
            v = grid[iy, ix]
            ax.text(x, y, f"{v:.2f}"[1:] if v < 1 else "1", ha="center", va="center",
                    fontsize=5, color="w" if v < 0.5 * grid.max() else "k")  # fmt: skip
    ax.plot(*PENALTY_SPOT, "r+", ms=8)
    ax.plot(*CENTRE_SPOT, "r+", ms=8)
    ax.set_xlabel("x (left team attacks toward +1)")
    ax.set_ylabel("y")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.025, label="xT")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    import jax
    import numpy as np

    from envs.football import Football
    from jaxmarl_llm.methods.xt.collect import match_counts
    from jaxmarl_llm.methods.xt.events import TALLY_NAMES
    from jaxmarl_llm.methods.xt.grid import MAX_ITERATIONS, TOLERANCE, XTCounts, expected_threat
    from jaxmarl_llm.methods.xt.gridfile import DEFAULT_GRID, save_grid

    scenarios = args.scenario or list(SCENARIOS)
    tol = TOLERANCE if args.tol is None else args.tol
    max_it = MAX_ITERATIONS if args.max_iterations is None else args.max_iterations
    start = time.time()
    counts, per_scenario = XTCounts.zeros(), {}
    collect = jax.jit(match_counts, static_argnums=(0, 2, 3))
    for i, name in enumerate(scenarios):
        env = Football(name, max_steps=args.steps)
        key = jax.random.fold_in(jax.random.PRNGKey(args.seed), i)
        c, tallies = collect(env, key, args.episodes, args.epsilon)
        counts = counts + c
        per_scenario[name] = {
            "steps_per_episode": env.max_steps,
            "moves": int(c.moves.sum()),
            "successful_moves": int(c.success.sum()),
            "shots": int(c.shots.sum()),
            "goals": int(c.goals.sum()),
            **{n: int(v) for n, v in zip(TALLY_NAMES, np.asarray(tallies), strict=True)},
        }
        print(f"{name}: {per_scenario[name]}", flush=True)
    grid, iterations = expected_threat(counts, tol=tol, max_iterations=max_it)
    grid = np.asarray(grid)
    seconds = time.time() - start
    summary = {
        "xT_penalty_spot": zone_value(grid, PENALTY_SPOT),
        "xT_centre_spot": zone_value(grid, CENTRE_SPOT),
        "xT_max": float(grid.max()),
        "zones_without_actions": int(((counts.moves + counts.shots) == 0).sum()),
    }
    record = {
        "made_by": "experiments/xt_grid.py",
        "method": "Singh's xT (V-GEPF appendix C.3, eq. 24), iterated from 0 to convergence",
        "scenarios": scenarios,
        "episodes_per_scenario": args.episodes,
        "seed": args.seed,
        "left_policy": f"scripted intent as actions, epsilon={args.epsilon} random actions",
        "right_policy": "scripted",
        "events": "both teams, in their attacking frames (right team turned through the centre)",
        "tolerance": tol,
        "max_iterations": max_it,
        "iterations": int(iterations),
        "counts": {
            "moves": int(counts.moves.sum()),
            "successful_moves": int(counts.success.sum()),
            "shots": int(counts.shots.sum()),
            "goals": int(counts.goals.sum()),
        },
        "per_scenario": per_scenario,
        "summary": summary,
        "seconds": round(seconds, 1),
    }
    out = args.out or DEFAULT_GRID
    save_grid(out, grid, record)
    title = (
        f"xT of football ({', '.join(scenarios)}; {args.episodes} matches each)\n"
        f"{record['counts']['moves']} moves, {record['counts']['shots']} shots, "
        f"{record['counts']['goals']} goals; {int(iterations)} iterations"
    )
    plot_grid(grid, args.png, title)
    print(f"iterations {int(iterations)}, {summary}, {seconds:.1f} s")
    print(f"wrote {out} and {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
