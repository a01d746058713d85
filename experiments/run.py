"""Run an experiment: ``python experiments/run.py NAME [key=value ...]``.

NAME is a config in jaxmarl_llm/configs/ (without .yaml) or a path to a YAML file.
Overrides are dotted keys, e.g. ``algo.lr=3e-4 env.kwargs.num_agents=4 num_seeds=4``;
``resume=RUN_DIR`` continues a stopped run. ``--list`` shows configs and environments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

# this checkout's package, not whichever one is installed: a run from another worktree
# runs (and records the commit of) its own code
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    # The library's progress messages (LCA labelling, YOLO-MARL's plan) at INFO, on stderr;
    # other packages' loggers stay at WARNING.
    logging.basicConfig(format="%(message)s")
    logging.getLogger("jaxmarl_llm").setLevel(logging.INFO)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "name", nargs="?", help="config name in jaxmarl_llm/configs/ or a YAML path"
    )
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    parser.add_argument("--list", action="store_true", help="list configs, envs and algorithms")
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config and exit"
    )
    args = parser.parse_args(argv)

    from jaxmarl_llm.distributed import initialize_from_environment, is_primary
    from jaxmarl_llm.errors import ConfigError, RunError

    # one of several processes (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
    # JAX_PROCESS_ID, or srun): they join before anything asks JAX for its devices
    try:
        initialize_from_environment()
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2

    from jaxmarl_llm.config import available_configs, load_config, to_yaml

    if args.list or not args.name:
        import envs
        from jaxmarl_llm.learners.registry import algorithms

        print("configs:     ", " ".join(available_configs()))
        print("algorithms:")
        for name, spec in algorithms().items():
            print(f"  {name:<8} {spec.summary}")
        print("environments:", " ".join(envs.names()))
        return 0 if args.list else 2

    try:
        cfg = load_config(args.name, args.overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(to_yaml(cfg))
        return 0

    from jaxmarl_llm.runner import run_experiment

    try:
        result = run_experiment(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    except RunError as e:
        # e.g. a missing weights file, an endpoint that stays down, a replay without the
        # answer, a model whose code the sandbox refused
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if is_primary():
        print(json.dumps(result.summary, indent=2))
        print(f"results in {result.run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
