"""The text bandit over kitchen prompts (``bandit_prompts``, ``bandit_learner``) with the
tiny random decoder (two blocks, hashed word tokens)."""

from __future__ import annotations

import functools

import jax
import numpy as np

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
