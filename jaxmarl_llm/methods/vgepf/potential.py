"""V-GEPF's potential and shaping reward (paper section 4.1).

``phi(s | l) = cos(tau_I(render(s)), tau_L(l))`` (eq. 2), or with ``normalise`` the cosine
as ``(phi - mean) / std`` with the statistics of the skill's first batch, and 0 at an
episode's end;
``F = gamma * phi(s') - phi(s)``, the same for every agent. The shaper's parameters hold
the CLIP image tower, the skill's unit text embedding, the normalisation and the skill
index, so a skill switch is a change of parameters and never a recompilation.

``every_k``: phi is evaluated on states whose episode step (``FootballState.step``) is a
multiple of ``every_k`` and is 0 on the others. 0 is the normalised potential's mean, so
a skipped state counts as an average one (the config refuses ``every_k > 1`` on the raw
cosine, whose mean is not 0). The potential stays a function of the state
alone, so the shaping is still potential-based (the optimal policy is unchanged), and a
function of the batch alone (no value is carried between steps). Inside a learner the
image tower still runs on every state: the learner vmaps the shaper over seeds, where a
per-state choice becomes a select that computes both sides. ``every_k`` thins where the
reward is paid and makes the host-side renormalisation of a selection round cheaper
(only the evaluated states of the round's batch are encoded); it does not cut the
in-scan cost.

Cost per env step: one render and one image-tower pass inside IPPO/MAPPO/HAPPO, which
carry phi of each step's next state to the step after (``Shaper.potential``); two
(``state`` and ``next_state``) where a learner calls ``apply`` on a batch.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from envs.football.render import render
from jaxmarl_llm.methods.vgepf.clip_model import instruction_embeddings
from jaxmarl_llm.methods.vgepf.skills import skill, skill_index
from jaxmarl_llm.shaper import CombineMode, Shaper, potential_difference
from jaxmarl_llm.transitions import TransitionBatch
from jaxmarl_llm.vision.clip import CLIPConfig, LoadedCLIP, encode_image, fit_images

# what the image tower reads of the CLIP parameters (the text tower stays on the host)
IMAGE_KEYS = ("vision", "visual_projection", "logit_scale")


@struct.dataclass
class VGEPFParams:
    image: Any  # CLIP image-tower parameters
    text: jax.Array  # [D] float32, the skill's unit text embedding
    mean: jax.Array  # [] float32, subtracted from the cosine
    std: jax.Array  # [] float32, divides it
    skill: jax.Array  # [] int32, index into SKILLS


def image_params(clip_params: dict) -> dict:
    """The parameters ``encode_image`` reads (the text tower left out)."""
    return {k: v for k, v in clip_params.items() if k in IMAGE_KEYS}


def text_embedding(clip: LoadedCLIP, name: str) -> np.ndarray:
    """Unit text embedding ``[D]`` of skill ``name``'s instruction (host side)."""
    if clip.tokenizer is None:
        from jaxmarl_llm.vision.clip import CLIPWeightsError

        raise CLIPWeightsError(
            f"CLIP checkpoint {clip.path} has no tokenizer files (vocab.json + merges.txt or "
            "tokenizer.json), which V-GEPF needs to embed its skills"
        )
    return np.asarray(instruction_embeddings(clip, [skill(name).instruction])[0], np.float32)


def initial_params(clip: LoadedCLIP, name: str) -> VGEPFParams:
    """Skill ``name`` with no normalisation (mean 0, std 1)."""
    return VGEPFParams(
        image=image_params(clip.params),
        text=jnp.asarray(text_embedding(clip, name)),
        mean=jnp.zeros((), jnp.float32),
        std=jnp.ones((), jnp.float32),
        skill=jnp.asarray(skill_index(name), jnp.int32),
    )


def frames(states: Any, size: int) -> jax.Array:
    """Rendered frames ``[B, size, size, 3]`` uint8 of football states with leaves ``[B, ...]``."""
    return jax.vmap(lambda s: render(s, size))(states)


def image_embeddings(cfg: CLIPConfig, image: Any, states: Any, size: int) -> jax.Array:
    """Unit image embeddings ``[B, D]`` of states with leaves ``[B, ...]``, drawn at ``size``
    pixels and resized to the CLIP's input."""
    x = frames(states, size).astype(jnp.float32) / 255.0
    emb = encode_image(cfg, image, fit_images(x, cfg.image_size))
    return emb / jnp.linalg.norm(emb, axis=-1, keepdims=True)


def evaluated(step: jax.Array, every_k: int) -> jax.Array:
    """Whether phi is evaluated at episode step ``step`` (else it is 0)."""
    return step % every_k == 0


def potential(
    cfg: CLIPConfig, params: VGEPFParams, states: Any, size: int, every_k: int = 1
) -> jax.Array:
    """The potential ``[...]`` of football states with any leading shape ``[...]`` (the
    shape of ``states.step``): the cosine less ``params.mean``, over ``params.std`` (0 and
    1 for the raw cosine)."""
    lead = states.step.shape
    n = int(np.prod(lead)) if lead else 1
    flat = jax.tree.map(lambda x: x.reshape((n, *x.shape[len(lead) :])), states)
    cos = image_embeddings(cfg, params.image, flat, size) @ params.text  # [n]
    phi = (cos - params.mean) / params.std
    phi = jnp.where(evaluated(flat.step, every_k), phi, 0.0)
    return phi.reshape(lead)


def shaping_reward(
    cfg: CLIPConfig,
    params: VGEPFParams,
    batch: TransitionBatch,
    gamma: float,
    size: int,
    every_k: int = 1,
) -> jax.Array:
    """``F = gamma * phi(s') - phi(s)`` per agent ``[..., N]``, ``phi(s') = 0`` where the
    episode ended."""
    phi = potential(cfg, params, batch.state, size, every_k)
    phi_next = potential(cfg, params, batch.next_state, size, every_k)
    return potential_difference(gamma, batch.done, phi, phi_next, batch.reward)


def potential_shaper(
    clip_cfg: CLIPConfig,
    params: VGEPFParams,
    mode: CombineMode = CombineMode.add,
    coef: float = 0.5,
    gamma: float = 0.995,
    image_size: int | None = None,
    every_k: int = 1,
    feedback: Any = None,
) -> Shaper:
    """The V-GEPF shaper over football env states; ``coef`` is the paper's rho."""
    size = int(image_size or clip_cfg.image_size)

    def apply(p: VGEPFParams, batch: TransitionBatch) -> jax.Array:
        return shaping_reward(clip_cfg, p, batch, gamma, size, every_k)

    def phi(p: VGEPFParams, states: Any) -> jax.Array:
        return potential(clip_cfg, p, states, size, every_k)

    return Shaper(
        apply=apply,
        params=params,
        fields=("state", "next_state"),
        mode=mode,
        coef=coef,
        name="vgepf",
        feedback=feedback,
        potential=phi,
        gamma=gamma,
    )
