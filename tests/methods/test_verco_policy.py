"""Verco's LM action policy, LoRA adapters and losses on a tiny random Gemma 3 decoder.

The decoder is the project's decoder in Gemma 3's configuration, a few kilobytes (two
layers, one local and one global), so every check runs in CPU seconds; the code under test
only relies on the decoder's calling convention, the same for every family.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxmarl_llm.lm.decoder import Decoder, init_cache
from jaxmarl_llm.lm.lora import (
    LoraAdapter,
    init_lora,
    load_adapters,
    merge_lora,
    parameter_count,
    save_adapters,
)
from jaxmarl_llm.methods.verco.losses import (
    chosen_log_prob,
    cut_message_tokens,
    cut_message_words,
    masked_token_cross_entropy,
    message_budget_mask,
    message_sft_loss,
    policy_entropy,
    ppo_loss,
)
from jaxmarl_llm.methods.verco.models import tiny_gemma_config
from jaxmarl_llm.methods.verco.policy import (
    DecoderLM,
    ValueHead,
    action_log_probs,
    action_scores,
    candidate_token_log_probs,
    last_valid_index,
    masked_log_softmax,
    pack_candidates,
    pack_prompts,
    positions_from_valid,
    prompt_features,
)

# the local layer's window (6) is shorter than the prompts, so it matters
TINY = tiny_gemma_config(vocab_size=97, context_length=128, sliding_window=6).decoder
LM = DecoderLM(Decoder(TINY), init_cache)

# Three prompts of different lengths; candidate lists of different sizes and lengths.
PROMPTS = [[5, 17, 23, 4, 9, 31, 2, 8], [11, 3, 40], [7, 7, 19, 60, 21]]
CANDIDATES = [
    [[12, 13], [14], [15, 16, 17]],
    [[20, 21, 22], [23, 24]],
    [[30], [31, 32], [33, 34, 35], [36]],
]
K, C, T = 4, 3, 9

# Checks that are not about jit call the policy and the model jitted: run op by op, each
# call's shapes compile a few hundred one-op programs (the with/without-jit variants below
# cover eager execution).
policy_log_probs = jax.jit(functools.partial(action_log_probs, LM))


@functools.partial(jax.jit, static_argnames="return_hidden")
def full_forward(params, tokens, positions, valid, return_hidden=False):
    """The model over whole sequences from an empty cache: logits, or the hidden states."""
    out, _ = Decoder(TINY).apply(
        {"params": params},
        tokens,
        positions,
        valid,
        init_cache(TINY, *tokens.shape),
        return_hidden=return_hidden,
    )
    return out


@functools.lru_cache(maxsize=1)
def base_params():
    cache = init_cache(TINY, 1, 4)
    x = jnp.zeros((1, 4), jnp.int32)
    params = Decoder(TINY).init(jax.random.key(0), x, x, jnp.ones((1, 4), bool), cache)["params"]
    # Random weights give near-uniform next tokens; sharpen them so that differences
    # between candidates (and mistakes in scoring them) are large.
    return jax.tree.map(lambda w: w * 3.0 if w.ndim == 2 else w, params)


def nonzero_lora(seed=1, scale=0.3, targets=("q", "v")) -> LoraAdapter:
    lora = init_lora(jax.random.key(seed), base_params(), targets=targets, rank=4, alpha=8.0)
    keys = jax.random.split(jax.random.key(seed + 100), len(targets))
    b = {
        t: scale * jax.random.normal(k, lora.b[t].shape) for t, k in zip(targets, keys, strict=True)
    }
    return lora.replace(b=b)


def batch(left=True):
    prompt_tokens, prompt_valid = pack_prompts(PROMPTS, T, left=left)
    cand_tokens, cand_valid, avail = pack_candidates(CANDIDATES, K, C)
    return prompt_tokens, prompt_valid, cand_tokens, cand_valid, avail


def scratch_sequence_log_probs(params):
    """Reference: each prompt+candidate as its own sequence, run from an empty cache."""
    rows = [(n, k, p + c) for n, p in enumerate(PROMPTS) for k, c in enumerate(CANDIDATES[n])]
    length = max(len(seq) for *_, seq in rows)
    tokens = np.zeros((len(rows), length), np.int32)
    for i, (*_, seq) in enumerate(rows):
        tokens[i, : len(seq)] = seq
    valid = tokens != 0
    positions = np.broadcast_to(np.arange(length), tokens.shape)
    logits = full_forward(params, tokens, positions, valid)
    log_probs = np.asarray(jax.nn.log_softmax(logits, axis=-1))
    out = np.zeros((len(PROMPTS), K))
    for i, (n, k, _) in enumerate(rows):
        p, cand = len(PROMPTS[n]), CANDIDATES[n][k]
        out[n, k] = sum(log_probs[i, p - 1 + j, tok] for j, tok in enumerate(cand))
    return out


def scratch_last_hidden(params):
    hidden = []
    for p in PROMPTS:
        x = jnp.asarray([p])
        h = full_forward(
            params, x, jnp.arange(len(p))[None], jnp.ones_like(x, bool), return_hidden=True
        )
        hidden.append(h[0, -1])
    return np.stack(hidden)


# ----- LoRA -----------------------------------------------------------------------------


class LoraTest(chex.TestCase):
    def test_init_shapes_and_zero_b(self):
        lora = init_lora(jax.random.key(0), base_params(), rank=4, alpha=8.0)
        chex.assert_shape(lora.a["q"], (2, 32, 4))
        chex.assert_shape(lora.b["q"], (2, 4, 32))
        chex.assert_shape(lora.a["v"], (2, 32, 4))
        chex.assert_shape(lora.b["v"], (2, 4, 16))
        assert lora.scale == 2.0 and float(jnp.abs(lora.a["q"]).max()) > 0
        np.testing.assert_array_equal(lora.b["v"], 0.0)
        with pytest.raises(ValueError, match="no attention projection 'x'"):
            init_lora(jax.random.key(0), base_params(), targets=("x",))

    @chex.variants(with_jit=True, without_jit=True)
    def test_merge_with_zero_b_is_the_base(self):
        lora = init_lora(jax.random.key(0), base_params(), targets=("q", "k", "v", "o"))
        merged = self.variant(merge_lora)(base_params(), lora)
        chex.assert_trees_all_equal(merged, base_params())

    @chex.variants(with_jit=True, without_jit=True)
    def test_merge_adds_scaled_low_rank_product(self):
        lora = nonzero_lora()
        merged = self.variant(merge_lora)(base_params(), lora)
        attn, base_attn = merged["layers"]["attn"], base_params()["layers"]["attn"]
        for t in ("q", "v"):
            expected = base_attn[t]["kernel"] + 2.0 * np.einsum(
                "lir,lro->lio", lora.a[t], lora.b[t]
            )
            np.testing.assert_allclose(attn[t]["kernel"], expected, rtol=1e-5, atol=1e-6)
        chex.assert_trees_all_equal(attn["k"], base_attn["k"])
        chex.assert_trees_all_equal(merged["layers"]["mlp"], base_params()["layers"]["mlp"])

    def test_save_load_round_trip_resumes_identically(self):
        lora = nonzero_lora()
        head = ValueHead((8,)).init(jax.random.key(3), jnp.zeros((1, 32)))["params"]
        tree = {"action": lora, "value_head": head}
        like = {"action": nonzero_lora(seed=7), "value_head": jax.tree.map(jnp.zeros_like, head)}
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            save_adapters(f"{tmp}/ckpt", tree)
            restored = load_adapters(f"{tmp}/ckpt", like)
            wrong_alpha = {**like, "action": like["action"].replace(alpha=1.0)}
            with pytest.raises(ValueError, match="another layout"):
                load_adapters(f"{tmp}/ckpt", wrong_alpha)
        chex.assert_trees_all_equal(restored, tree)
        assert restored["action"].alpha == lora.alpha
        args = batch()
        before, _ = policy_log_probs(base_params(), lora, *args)
        after, _ = policy_log_probs(base_params(), restored["action"], *args)
        np.testing.assert_array_equal(after, before)


# ----- the action policy ----------------------------------------------------------------


class PolicyTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_positions_and_last_index(self):
        valid = jnp.array([[0, 0, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], bool)
        pos = self.variant(positions_from_valid)(valid, jnp.array([0, 10, 2]))
        np.testing.assert_array_equal(pos[0, 2:], [0, 1, 2])
        np.testing.assert_array_equal(pos[1, :2], [10, 11])
        np.testing.assert_array_equal(pos[2], [2, 3, 4, 5, 6])
        np.testing.assert_array_equal(self.variant(last_valid_index)(valid), [4, 1, 4])

    @chex.variants(with_jit=True, without_jit=True)
    def test_distribution_sums_to_one_over_available_actions(self):
        args = batch()
        log_probs, hidden = self.variant(functools.partial(action_log_probs, LM))(
            base_params(), nonzero_lora(), *args
        )
        avail = args[-1]
        chex.assert_shape(log_probs, (3, K))
        chex.assert_shape(hidden, (3, 32))
        np.testing.assert_allclose(np.exp(log_probs).sum(axis=-1), 1.0, rtol=1e-5)
        assert np.all(np.isneginf(np.asarray(log_probs)[~avail]))
        assert np.all(np.isfinite(np.asarray(log_probs)[avail]))

    @chex.variants(with_jit=True, without_jit=True)
    def test_cached_scoring_equals_scoring_from_scratch(self):
        lora = nonzero_lora()
        params = merge_lora(base_params(), lora)
        reference = scratch_sequence_log_probs(params)
        score = self.variant(functools.partial(candidate_token_log_probs, LM))
        for left in (True, False):
            p_tok, p_valid, c_tok, c_valid, avail = batch(left)
            token_log_probs, last_hidden = score(params, p_tok, p_valid, c_tok, c_valid)
            summed = np.asarray(token_log_probs).sum(-1)
            np.testing.assert_allclose(summed[avail], reference[avail], rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(
                last_hidden, scratch_last_hidden(params), rtol=1e-4, atol=1e-4
            )
        # and the policy is the softmax of those sums over the available actions
        log_probs, _ = policy_log_probs(base_params(), lora, *batch())
        expected = jax.nn.log_softmax(jnp.where(avail, reference, -jnp.inf), axis=-1)
        np.testing.assert_allclose(log_probs[avail], expected[avail], rtol=1e-4, atol=1e-4)

    @chex.variants(with_jit=True, without_jit=True)
    def test_normalizations(self):
        token_log_probs = jnp.array([[[-1.0, -2.0, 0.0], [-3.0, 0.0, 0.0]]])
        valid = jnp.array([[[True, True, False], [True, False, False]]])
        words = jnp.array([[4, 1]])
        score = self.variant(action_scores, static_argnames="normalization")
        np.testing.assert_allclose(score(token_log_probs, valid, "none"), [[-3.0, -3.0]])
        np.testing.assert_allclose(score(token_log_probs, valid, "token"), [[-1.5, -3.0]])
        np.testing.assert_allclose(score(token_log_probs, valid, "word", words), [[-0.75, -3.0]])
        with pytest.raises(ValueError, match="word_counts"):
            action_scores(token_log_probs, valid, "word")
        with pytest.raises(ValueError, match="normalization must be"):
            action_scores(token_log_probs, valid, "mean")

    def test_normalizations_end_to_end(self):
        args = batch()
        avail = args[-1]
        sums = scratch_sequence_log_probs(base_params())
        counts = np.array([[len(c) for c in cs] + [0] * (K - len(cs)) for cs in CANDIDATES])
        words = np.array([[2, 1, 3, 1], [1, 2, 1, 1], [1, 1, 1, 1]])
        for norm, scores in [
            ("none", sums),
            ("token", sums / np.maximum(counts, 1)),
            ("word", sums / words),
        ]:
            log_probs, _ = action_log_probs(
                LM, base_params(), None, *args, normalization=norm, word_counts=words
            )
            expected = jax.nn.log_softmax(jnp.where(avail, scores, -jnp.inf), axis=-1)
            np.testing.assert_allclose(log_probs[avail], expected[avail], rtol=1e-4, atol=1e-4)

    @chex.variants(with_jit=True, without_jit=True)
    def test_masked_log_softmax(self):
        log_probs = self.variant(masked_log_softmax)(
            jnp.array([[1.0, 5.0, 1.0]]), jnp.array([[True, False, True]])
        )
        np.testing.assert_allclose(log_probs[0, [0, 2]], np.log(0.5), rtol=1e-6)
        assert np.isneginf(log_probs[0, 1])

    @chex.variants(with_jit=True, without_jit=True)
    def test_prompt_features_are_the_base_models_last_hidden(self):
        p_tok, p_valid, *_ = batch(left=False)
        features = self.variant(functools.partial(prompt_features, LM))(
            base_params(), p_tok, p_valid
        )
        np.testing.assert_allclose(
            features, scratch_last_hidden(base_params()), rtol=1e-4, atol=1e-4
        )
        head = ValueHead()
        values = head.apply(head.init(jax.random.key(0), features), features)
        chex.assert_shape(values, (3,))

    def test_pack_rejects_what_does_not_fit(self):
        with pytest.raises(ValueError, match="prompt 0 has 3 tokens"):
            pack_prompts([[1, 2, 3]], 2)
        with pytest.raises(ValueError, match="candidate 0,0 has 0 tokens"):
            pack_candidates([[[]]], 1, 2)


# ----- gradients and adapters -----------------------------------------------------------


def policy_objective(base, lora, action=0):
    log_probs, _ = policy_log_probs(base, lora, *batch())
    return log_probs[:, action].sum()


class GradientTest(chex.TestCase):
    def test_gradients_reach_only_the_adapter(self):
        lora = init_lora(jax.random.key(1), base_params(), rank=4)
        base_grad, lora_grad = jax.jit(jax.grad(policy_objective, argnums=(0, 1)))(
            base_params(), lora
        )
        assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(base_grad))
        # with b = 0 only b moves the output; a's gradient is b-weighted, so zero
        assert float(jnp.abs(lora_grad.b["q"]).max()) > 0
        assert float(jnp.abs(lora_grad.b["v"]).max()) > 0
        np.testing.assert_array_equal(lora_grad.a["q"], 0.0)

        optimizer = optax.adam(1e-2)
        opt_state = optimizer.init(lora)
        # adam keeps mu and nu of the adapter and a step count: nothing of the base
        assert parameter_count(opt_state) == 2 * parameter_count(lora) + 1
        updates, _ = optimizer.update(lora_grad, opt_state, lora)
        stepped = optax.apply_updates(lora, updates)
        lora_grad = jax.jit(jax.grad(policy_objective, argnums=1))(base_params(), stepped)
        assert float(jnp.abs(lora_grad.a["q"]).max()) > 0
        assert float(jnp.abs(lora_grad.a["v"]).max()) > 0

    def test_entropy_gradient_is_finite_with_unavailable_actions(self):
        def mean_entropy(lora):
            log_probs, _ = policy_log_probs(base_params(), lora, *batch())
            return policy_entropy(log_probs).mean()

        grad = jax.jit(jax.grad(mean_entropy))(nonzero_lora())
        assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grad))

    def test_two_adapter_sets_are_independent(self):
        adapters = {
            "message": init_lora(jax.random.key(10), base_params(), rank=4),
            "action": init_lora(jax.random.key(11), base_params(), rank=4),
        }
        assert not np.allclose(adapters["message"].a["q"], adapters["action"].a["q"])
        tokens, valid = pack_prompts([[5, 6, 7, 8, 9, 10]], 6)
        message_mask = jnp.asarray(np.arange(6) >= 3)[None]
        sft = functools.partial(message_sft_loss, LM, base_params())
        message_loss = sft(adapters["message"], tokens, valid, message_mask)
        message_policy, _ = policy_log_probs(base_params(), adapters["message"], *batch())

        grad = jax.jit(jax.grad(policy_objective, argnums=1))(base_params(), adapters["action"])
        stepped = jax.tree.map(lambda w, g: w + 0.5 * g, adapters["action"], grad)
        adapters = {**adapters, "action": stepped}
        moved, _ = policy_log_probs(base_params(), adapters["action"], *batch())
        assert not np.allclose(moved, message_policy)  # the action adapter did change
        np.testing.assert_array_equal(
            sft(adapters["message"], tokens, valid, message_mask), message_loss
        )
        still, _ = policy_log_probs(base_params(), adapters["message"], *batch())
        np.testing.assert_array_equal(still, message_policy)


# ----- losses ---------------------------------------------------------------------------


class LossTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_entropy_over_available_actions(self):
        log_probs = jnp.log(jnp.array([[0.5, 0.0, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]]))
        np.testing.assert_allclose(
            self.variant(policy_entropy)(log_probs), [np.log(2), np.log(4)], rtol=1e-6
        )
        np.testing.assert_array_equal(
            self.variant(chosen_log_prob)(log_probs, jnp.array([2, 1])), log_probs[[0, 1], [2, 1]]
        )

    @chex.variants(with_jit=True, without_jit=True)
    def test_ppo_loss_hand_computed(self):
        log_probs = jnp.log(jnp.array([[0.6, 0.4, 0.0], [0.5, 0.25, 0.25]]))
        actions = jnp.array([0, 2])
        old = jnp.log(jnp.array([0.5, 0.25]))
        adv = jnp.array([1.0, -1.0])
        values, old_values, targets = jnp.array([1.0, 0.0]), jnp.zeros(2), jnp.array([2.0, 0.0])
        loss, stats = self.variant(
            functools.partial(ppo_loss, clip_eps=0.1, value_coef=0.5, entropy_coef=0.01)
        )(log_probs, actions, old, adv, values, old_values, targets)
        # ratios 1.2 (clipped to 1.1, A > 0) and 1.0
        policy = -np.mean([1.1 * 1.0, 1.0 * -1.0])
        # value 1.0 clipped to 0.1 from old 0.0: pessimistic (2 - 0.1)^2
        critic = 0.5 * np.mean([(2.0 - 0.1) ** 2, 0.0])
        entropy = np.mean(
            [-(0.6 * np.log(0.6) + 0.4 * np.log(0.4)), -(0.5 * np.log(0.5) + 0.5 * np.log(0.25))]
        )
        np.testing.assert_allclose(stats["policy_loss"], policy, rtol=1e-5)
        np.testing.assert_allclose(stats["value_loss"], critic, rtol=1e-5)
        np.testing.assert_allclose(stats["entropy"], entropy, rtol=1e-5)
        np.testing.assert_allclose(loss, policy + 0.5 * critic - 0.01 * entropy, rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_masked_token_cross_entropy(self):
        logits = jnp.log(jnp.array([[[0.5, 0.5], [0.9, 0.1], [0.2, 0.8]]]))
        tokens = jnp.array([[1, 0, 1]])
        mask = jnp.array([[False, False, True]])  # only the last token is the message
        loss = self.variant(masked_token_cross_entropy)(logits, tokens, mask)
        np.testing.assert_allclose(loss, -np.log(0.1), rtol=1e-6)
        both = self.variant(masked_token_cross_entropy)(logits, tokens, jnp.ones((1, 3), bool))
        np.testing.assert_allclose(both, -(np.log(0.5) + np.log(0.1)) / 2, rtol=1e-6)

    def test_sft_lowers_the_message_loss(self):
        prompts = [[5, 6, 7, 8], [9, 10, 11]]
        messages = [[40, 41, 42], [43, 44]]
        seqs = [p + m for p, m in zip(prompts, messages, strict=True)]
        tokens, valid = pack_prompts(seqs, 7, left=True)
        message_mask = np.zeros_like(valid)
        for row, m in enumerate(messages):
            message_mask[row, 7 - len(m) :] = True
        lora = init_lora(jax.random.key(2), base_params(), rank=4)
        loss_fn = functools.partial(message_sft_loss, LM, base_params())
        optimizer = optax.adam(3e-2)

        @jax.jit
        def step(lora, opt_state):
            loss, grad = jax.value_and_grad(loss_fn)(lora, tokens, valid, message_mask)
            updates, opt_state = optimizer.update(grad, opt_state, lora)
            return optax.apply_updates(lora, updates), opt_state, loss

        opt_state = optimizer.init(lora)
        losses = []
        for _ in range(6):
            lora, opt_state, loss = step(lora, opt_state)
            losses.append(float(loss))
        assert losses[-1] < 0.8 * losses[0], losses
        # prompt tokens are not learnt: masking the whole message out gives no gradient
        grad = jax.jit(jax.grad(loss_fn))(lora, tokens, valid, np.zeros_like(message_mask))
        assert all(float(jnp.abs(g).max()) == 0.0 for g in jax.tree.leaves(grad))

    def test_ppo_step_moves_probability_toward_the_advantaged_action(self):
        prompt_tokens, prompt_valid = pack_prompts([[5, 17, 23, 4]], 4)
        cand_tokens, cand_valid, avail = pack_candidates([[[12, 13], [14]]], 2, 2)
        features = prompt_features(LM, base_params(), prompt_tokens, prompt_valid)
        head = ValueHead((16,))
        params = {
            "action": init_lora(jax.random.key(4), base_params(), rank=4),
            "value_head": head.init(jax.random.key(5), features)["params"],
        }

        # jitted: op by op, the decoder's passes compile hundreds of small programs (the
        # policy without jit is checked in PolicyTest)
        @jax.jit
        def policy(lora):
            args = (prompt_tokens, prompt_valid, cand_tokens, cand_valid, avail)
            return policy_log_probs(base_params(), lora, *args)[0]

        old_log_probs = policy(params["action"])
        old_value = head.apply({"params": params["value_head"]}, features)
        actions, advantages = jnp.array([0]), jnp.array([1.0])

        def loss_fn(params):
            values = head.apply({"params": params["value_head"]}, features)
            return ppo_loss(
                policy(params["action"]),
                actions,
                chosen_log_prob(old_log_probs, actions),
                advantages,
                values,
                old_value,
                old_value + advantages,
            )[0]

        optimizer = optax.adam(1e-2)
        grad = jax.jit(jax.grad(loss_fn))(params)
        updates, _ = optimizer.update(grad, optimizer.init(params), params)
        new_log_probs = policy(optax.apply_updates(params, updates)["action"])
        assert float(new_log_probs[0, 0]) > float(old_log_probs[0, 0]) + 1e-4
        np.testing.assert_allclose(jnp.exp(new_log_probs).sum(), 1.0, rtol=1e-5)


class MessageBudgetTest(chex.TestCase):
    def test_host_side_cuts(self):
        cut = cut_message_words("Bob,  pick up the tomato and chop it now please", 5)
        assert cut.kept == "Bob, pick up the tomato" and cut.dropped == 5 and cut.was_cut
        kept = cut_message_words("take the bowl", 10)
        assert kept.kept == "take the bowl" and kept.dropped == 0 and not kept.was_cut
        assert cut_message_tokens([1, 2, 3, 4], 3) == ([1, 2, 3], 1)

    @chex.variants(with_jit=True, without_jit=True)
    def test_device_side_mask(self):
        valid = jnp.array([[1, 1, 1, 1, 0], [0, 1, 1, 0, 0]], bool)
        kept, dropped = self.variant(message_budget_mask, static_argnums=1)(valid, 2)
        np.testing.assert_array_equal(kept, [[1, 1, 0, 0, 0], [0, 1, 1, 0, 0]])
        np.testing.assert_array_equal(dropped, [2, 0])
