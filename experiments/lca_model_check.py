"""How well an LCA run's state-scoring models rank the moves a good team makes.

    python experiments/lca_model_check.py --run RUN_DIR [--episodes 200] [--epsilon 0.3]

The held-out accuracy in ``lca/report.json`` is measured on pairs drawn like the
training pairs (random play and random states). This check plays episodes with the
env's scripted BFS policy (``greedy_actions``, a random action with probability
``epsilon``) and reports, per agent and per number of finished objects, how often the
sign of the learned step ``sigma(o') - sigma(o)`` agrees with the ranking heuristic on
moves the heuristic does not tie: the states a learning team must be guided through.
Writes ``experiments/results/lca/model_check_<env>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--run", type=Path, required=True, help="an LCA run folder")
    p.add_argument("--episodes", type=int, default=200, help="parallel rollouts of max_steps steps")
    p.add_argument("--epsilon", type=float, default=0.3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "experiments" / "results" / "lca")
    args = p.parse_args(argv)

    import jax
    import numpy as np

    import envs
    from envs.capabilities import ScriptedPolicy
    from jaxmarl_llm.methods.lca import load_run
    from jaxmarl_llm.methods.lca.pairs import both_states, rollout_transitions

    try:
        aenv, cfg, res = load_run(args.run)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = aenv.env
    if envs.capability(env, ScriptedPolicy) is None:
        print(f"error: {cfg.env.name} has no scripted policy (greedy_actions)", file=sys.stderr)
        return 2

    # every step of `episodes` scripted rollouts (auto-reset: no steps past an episode end)
    t = rollout_transitions(
        aenv, jax.random.PRNGKey(args.seed), args.episodes, env.max_steps, args.epsilon
    )
    phi, phi2 = both_states(env.heuristic_potential, t)
    f, f2 = both_states(env.agent_features, t)
    sig, sig2 = (
        res.model.apply_agents(res.params.model, f),
        res.model.apply_agents(res.params.model, f2),
    )
    s, a = t.state, t.actions
    d, ds = np.asarray(phi2 - phi), np.asarray(sig2 - sig)
    moving = np.asarray(a) != env.noop_action
    done = np.asarray(s.flags[:, : env.num_objects]).sum(-1)
    rows = []
    for i, role in enumerate(env.roles):
        for k in range(env.num_objects + 1):
            sel = moving[:, i] & (d[:, i] != 0) & (done == k)
            if sel.sum() < 20:
                continue
            acc = float(((ds[sel, i] > 0) == (d[sel, i] > 0)).mean())
            rows.append(
                {
                    "agent": i,
                    "role": role,
                    "objects_done": k,
                    "moves": int(sel.sum()),
                    "accuracy": acc,
                }
            )
    record = {
        "run": str(args.run),
        "env": cfg.env.name,
        "episodes": args.episodes,
        "epsilon": args.epsilon,
        "heldout_accuracy": res.report.get("val_accuracy_vs_heuristic"),
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"model_check_{cfg.env.name}.json").write_text(json.dumps(record, indent=1))
    held_out = record["heldout_accuracy"]
    print(f"held-out accuracy (pairs drawn like the training pairs): {held_out:.3f}")
    print("| agent | objects done | moves | accuracy on scripted-play moves |\n|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['agent']} ({r['role']}) | {r['objects_done']} | {r['moves']} "
            f"| {r['accuracy']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
