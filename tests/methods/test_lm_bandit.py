"""The text bandit over kitchen prompts (``bandit_prompts``, ``bandit_learner``) with the
tiny random decoder (two blocks, hashed word tokens)."""

from __future__ import annotations

import functools
import json

import jax
import numpy as np
import pytest

import envs
from jaxmarl_llm.lm.lora import merge_lora
from jaxmarl_llm.methods.verco.bandit_learner import BanditLearner, bandit_config
from jaxmarl_llm.methods.verco.bandit_prompts import kitchen_bandit, split_prompts
from jaxmarl_llm.methods.verco.models import load_policy_model

BATCH = 8


@functools.cache
def env():
    return envs.make("salad:A")


@functools.cache
def prompts():
    return kitchen_bandit(env(), num_envs=8, steps=30, seed=0)[0]


def learner(layers, lr, train, test, seed=0):
    cfg = bandit_config("tiny", layers, lr, BATCH, seed)
    return BanditLearner(cfg, env(), load_policy_model("tiny"), train, test)


def test_the_rewarded_action_is_available_and_depends_on_the_prompt():
    data = prompts()
    assert len(data) >= 20
    assert len({(p.prompt, p.avail.tobytes()) for p in data}) == len(data)
    for p in data:
        assert p.avail[p.rewarded] and p.avail.sum() > 1
        assert p.prompt.endswith("To make the salad, you should") and "Actions:" not in p.prompt
    assert len({p.rewarded for p in data}) >= 2
    train, test = split_prompts(data, 0.25, seed=0)
    arms = lambda ps: {(p.prompt, p.avail.tobytes()) for p in ps}  # noqa: E731
    assert len(test) == round(0.25 * len(data)) and not arms(train) & arms(test)
    assert arms(train) | arms(test) == arms(data)


@pytest.mark.slow  # the adapters' placement is also in test_verco_trunk.py's TopAdapterTest
def test_one_update_changes_only_the_adapters_of_the_configured_blocks():
    data = prompts()
    top = learner("last:1", 1e-2, data, data[:2])
    base = top.trainer.model.params
    top.step()
    lora = top.state["lora"]
    assert lora.a["q"].shape[0] == 1 and float(np.abs(lora.b["q"]).max()) > 0
    for target in ("q", "v"):
        merged = merge_lora(base, lora)["layers"]["attn"][target]["kernel"]
        kernel = base["layers"]["attn"][target]["kernel"]
        np.testing.assert_array_equal(merged[0], kernel[0])  # the trunk's block
        assert float(np.abs(merged[1] - kernel[1]).max()) > 0
    assert jax.tree.all(jax.tree.map(np.array_equal, top.trainer.model.params, base))


def test_a_fixed_prompt_is_learned():
    (one,) = [p for p in prompts() if p.avail.sum() >= 5][:1]
    bandit = learner("last:1", 5e-2, [one], [one], seed=1)
    before = bandit.evaluate()["test_prob"]
    rows = [bandit.step() for _ in range(10)]
    after = bandit.evaluate()
    assert before < 0.2 and after["test_prob"] > before + 0.2, (before, after, rows)
    assert after["test_accuracy"] == 1.0


def test_a_tune_seed_sweeps_on_one_seed_and_runs_the_others_at_its_best_rate(tmp_path, monkeypatch):
    """``--tune-seed``: the rates on one seed, the other seeds at each setting's best rate
    there; the summary's best rate is among the rates run on every seed, and a second call
    runs nothing again. (The runs themselves are faked: this checks the protocol.)"""
    from scripts import load_script

    from jaxmarl_llm.methods.verco import bandit_prompts, models

    fake = [bandit_prompts.BanditPrompt(f"p{i}", np.ones(3, bool), i % 3) for i in range(8)]
    monkeypatch.setattr(bandit_prompts, "kitchen_bandit", lambda *a, **k: (fake, 0))
    monkeypatch.setattr(models, "load_policy_model", lambda name: None)
    script = load_script("experiments/lm_bandit.py")
    ran = []

    def fake_run(args, env, model, train, test, layers, lr, seed):
        ran.append((layers, lr, seed))
        # seed 0 prefers 1e-3 for `all` and 1e-2 for last:1, the other rate close behind;
        # the other seeds do worse, so the best rate's mean over seeds is below the other
        # rate's one run
        best = 1e-3 if layers == "all" else 1e-2
        reward = (1.0 if lr == best else 0.95) - 0.1 * seed
        curve = [{"samples": 0, "test_accuracy": 0.2, "test_prob": 0.2}]
        curve += [{"samples": 8 * u, "reward": reward, "update_s": 0.1} for u in range(1, 5)]
        curve[-1] |= {"test_accuracy": reward, "test_prob": reward}
        return {"model": args.model, "layers": layers, "lr": lr, "seed": seed,
                **{k: vars(args)[k] for k in ("updates", "batch", "envs", "steps")},
                "test_prompts": args.test_prompts, "curve": curve, "mean_reward": reward,
                "final_test_accuracy": reward, "final_test_prob": reward,
                "start_test_accuracy": 0.2, "update_s": 0.1, "wall_s": 1.0}  # fmt: skip

    script.run_one = fake_run
    argv = ["--model", "tiny", "--layers", "all", "last:1", "--lrs", "1e-3", "1e-2",
            "--seeds", "0", "1", "2", "--tune-seed", "0", "--updates", "4", "--envs", "2",
            "--steps", "10", "--test-prompts", "2", "--out", str(tmp_path)]  # fmt: skip
    assert script.main(argv) == 0
    assert ran == [("all", 1e-3, 0), ("all", 1e-2, 0), ("all", 1e-3, 1), ("all", 1e-3, 2),
                   ("last:1", 1e-3, 0), ("last:1", 1e-2, 0), ("last:1", 1e-2, 1),
                   ("last:1", 1e-2, 2)]  # fmt: skip
    summary = (tmp_path / "summary.md").read_text()
    assert "| all | 0.001 | 3 |" in summary and "| last:1 | 0.01 | 3 |" in summary
    assert "(swept on seed 0)" in summary and (tmp_path / "reward.png").exists()
    table = json.loads((tmp_path / "summary.json").read_text())
    assert [(r["layers"], r["lr"], r["seeds"]) for r in table["rows"]] == [
        ("all", 0.001, 3),
        ("last:1", 0.01, 3),
    ]
    # the same rewards per seed at each one's best rate: within noise
    assert table["smallest_within_noise"] == "last:1" and "runs" not in table["rows"][0]
    assert script.main(argv) == 0 and len(ran) == 8  # kept in runs.jsonl
    with pytest.raises(SystemExit):
        script.main([*argv[:-2], "--tune-seed", "5", "--out", str(tmp_path)])
