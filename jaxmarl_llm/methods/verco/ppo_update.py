"""The PPO update's device functions: the loss gradient on one minibatch (the whole model,
or the top blocks from kept trunk states) and the two-optimiser step."""

from __future__ import annotations

import functools

import jax
import optax

from jaxmarl_llm.methods.verco.lm_policy import tile_rows
from jaxmarl_llm.methods.verco.losses import ppo_loss
from jaxmarl_llm.methods.verco.policy import action_log_probs
from jaxmarl_llm.methods.verco.trunk import top_action_log_probs


def _ppo_objective(head, settings, trainable, batch, log_pi):
    _, clip_eps, value_coef, entropy_coef = settings
    values = head.apply(trainable["value"], batch["features"])
    adv = batch["advantages"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    return ppo_loss(log_pi, batch["actions"], batch["log_probs"], adv, values, batch["values"],
                    batch["returns"], clip_eps, value_coef, entropy_coef)  # fmt: skip


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def ppo_grad(lm, head, settings, base_params, trainable, batch, cand_tokens, cand_valid,
             word_counts):  # fmt: skip
    """Loss, stats and gradient for ``trainable`` (``lora``, ``value``) on one minibatch;
    ``settings``: ``(normalization, clip_eps, value_coef, entropy_coef)``."""

    def loss(trainable):
        n = batch["tokens"].shape[0]
        log_pi, _ = action_log_probs(
            lm, base_params, trainable["lora"], batch["tokens"], batch["valid"],
            tile_rows(cand_tokens, n), tile_rows(cand_valid, n), batch["avail"], settings[0],
            tile_rows(word_counts, n),
        )  # fmt: skip
        return _ppo_objective(head, settings, trainable, batch, log_pi)

    return jax.value_and_grad(loss, has_aux=True)(trainable)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def ppo_grad_top(split, head, settings, top_params, trainable, batch, cand_tokens, cand_valid,
                 word_counts):  # fmt: skip
    """:func:`ppo_grad` from the trunk states the rollout kept (``batch["prompt_states"]``,
    ``batch["cand_states"]``): the top blocks alone run, forward and backward."""

    def loss(trainable):
        n = batch["valid"].shape[0]
        log_pi, _ = top_action_log_probs(
            split, top_params, trainable["lora"], batch["prompt_states"], batch["valid"],
            batch["cand_states"], tile_rows(cand_tokens, n), tile_rows(cand_valid, n),
            batch["avail"], settings[0], tile_rows(word_counts, n),
        )  # fmt: skip
        return _ppo_objective(head, settings, trainable, batch, log_pi)

    return jax.value_and_grad(loss, has_aux=True)(trainable)


@functools.cache
def optimizer(actor_lr: float, critic_lr: float, max_grad_norm: float):
    """Adam on the adapter (``actor_lr``) and on the value head (``critic_lr``), each with
    its own gradient clipping, as TWOSOME's two optimisers; one object per setting, so
    :func:`apply_updates` compiles once."""
    clipped_adam = lambda lr: optax.chain(optax.clip_by_global_norm(max_grad_norm),  # noqa: E731
                                          optax.adam(lr))  # fmt: skip
    return optax.multi_transform(
        {"actor": clipped_adam(actor_lr), "critic": clipped_adam(critic_lr)},
        {"lora": "actor", "value": "critic"},
    )


@functools.partial(jax.jit, static_argnums=0)
def apply_updates(opt, trainable, opt_state, grads):
    updates, opt_state = opt.update(grads, opt_state, trainable)
    return optax.apply_updates(trainable, updates), opt_state
