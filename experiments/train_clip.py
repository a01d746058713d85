"""Train V-GEPF's small football CLIP: rendered frames captioned by the skill predicates.

Pretrained CLIP weights cannot be obtained offline, so V-GEPF's default potential uses a
small CLIP trained here, contrastively, on frames of our football game:

1. **Frames.** Vmapped episodes of the four football scenarios (11 vs 11 easy/hard,
   academy counterattack easy/hard) under six behaviour policies for the controlled blue
   players (``POLICIES``: uniform random actions, the env's scripted policy translated
   to actions, mixtures, a passing-heavy and a defending variant), one state kept every
   ``stride`` steps. Each state gets the seven skill predicates
   (``jaxmarl_llm.methods.vgepf.predicates``).
2. **Captions and balance.** A frame whose predicate k holds is captioned with skill k's
   instruction; frames are multi-label (an attack near red's goal is also "ball
   location"), and the loss treats every true instruction as a positive (below). Frames
   where no predicate holds get the neutral caption ``NEUTRAL_CAPTION`` (a share
   ``--neutral`` of the data) rather than being dropped, so the model also learns what
   *not* to match: that lowers the skill cosines of predicate-false frames, which is the
   gap a potential needs. The data set is balanced by resampling, rarest skill first,
   until every skill holds in at least its quota of frames. Episodes (environments) are
   split into training and held-out ones, so held-out frames come from unseen episodes.
   Frames are ``render(state, image_size)`` (the size the CLIP takes); training flips
   them vertically at random (y -> -y leaves every predicate and the pitch unchanged).
3. **Tokenizer.** A byte-level BPE trained with ``tokenizers`` on the captions and some
   football vocabulary, laid out as OpenAI's CLIP vocabulary (the 256 byte symbols, the
   same with ``</w>``, one entry per merge, ``<|startoftext|>``, ``<|endoftext|>`` last),
   written as ``vocab.json`` + ``merges.txt``.
4. **Model and loss.** A small ViT CLIP (``model_config``). The loss is CLIP's symmetric
   InfoNCE with a learned temperature, over the batch's images and the distinct captions
   (the seven instructions and the neutral one) instead of one caption per image: with
   eight captions, a batch repeats each many times, and CLIP's image-by-image form would
   treat identical captions as negatives. Image -> text is a cross-entropy against the
   uniform distribution over the image's true captions; text -> image is, per caption,
   the cross-entropy against the uniform distribution over the batch images it is true
   for (a multi-positive InfoNCE; picking one true caption per frame instead would teach
   the model that the frame's other true skills are negatives and push their cosines
   down). AdamW with warm-up and cosine decay, gradient clipping, ``logit_scale``
   clamped at log 100 as in CLIP.
5. **Output** (``--out``): a Hugging Face CLIP directory (``config.json``,
   ``model.safetensors`` in float16, ``vocab.json``, ``merges.txt``) that
   ``jaxmarl_llm.vision.clip.load_clip`` reads, ``report.json`` (held-out retrieval and
   cosine statistics per skill, evaluated on the reloaded checkpoint; losses; data set
   counts; config; command; wall time) and ``README.md``.

The image tower's shape is ``--image-size`` (frame pixels), ``--grid`` (patches per
side), ``--vision-width``, ``--vision-layers``, ``--vision-heads`` and ``--vision-mlp``:
V-GEPF runs the tower on every state of training, so its cost is the shaper's
(``benchmarks/render_throughput.py`` prices a shape before it is trained).
``--evaluate DIR`` trains nothing: it scores the CLIP in DIR on the held-out frames a
training run with the same data options would hold out (one JSON line), so models of
different shapes or data are compared on the same frames.

Usage::

    python experiments/train_clip.py                 # the committed default model
    python experiments/train_clip.py --quick --out /tmp/clip   # a tiny smoke run
    python experiments/train_clip.py --evaluate experiments/models/football_clip
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import pathlib
import shlex
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from envs.football.env import (  # noqa: E402
    DIRECTIONS,
    HIGH_PASS,
    LONG_PASS,
    NUM_ACTIONS,
    RELEASE_DIRECTION,
    SHORT_PASS,
    Football,
)
from envs.football.render import render  # noqa: E402
from envs.football.scripted_actions import scripted_actions  # noqa: E402
from jaxmarl_llm.methods.vgepf.clip_model import DEFAULT_CLIP_DIR  # noqa: E402
from jaxmarl_llm.methods.vgepf.potential import image_params  # noqa: E402
from jaxmarl_llm.methods.vgepf.predicates import skill_predicates  # noqa: E402
from jaxmarl_llm.methods.vgepf.skills import SKILL_NAMES, SKILLS  # noqa: E402
from jaxmarl_llm.vision.clip import (  # noqa: E402
    CLIPConfig,
    CLIPTokenizer,
    encode_image,
    encode_text,
    init_params,
    load_clip,
    logits,
    save_clip,
)
from jaxmarl_llm.vision.clip.tokenizer import BOS, EOS, build_bpe, bytes_to_unicode  # noqa: E402

NEUTRAL_CAPTION = "The players are spread over the football pitch."
CAPTIONS = (*(s.instruction for s in SKILLS), NEUTRAL_CAPTION)  # caption c; K = 7 skills
K = len(SKILLS)
# extra text for the tokenizer, so the vocabulary covers more than the eight captions
FOOTBALL_TEXT = (
    "football soccer match game pitch field grass goal goals goalkeeper keeper net post",
    "ball player players team teams blue red home away opponent opponents side half",
    "pass passes passing passed long short high cross through ball receiver assist",
    "dribble dribbles dribbling dribbled run runs running sprint carry control touch",
    "attack attacks attacking attacker forward forwards striker winger wing counterattack",
    "defend defends defending defense defence defender defenders tackle block press mark",
    "formation formations line lines shape parallel spacing compact wide width depth",
    "midfield midfielder midfielders centre center back full back four four two",
    "shot shots shoot shooting score scores scoring kick kickoff corner throw in",
    "advantage numbers superiority overload space spaces close far near left right",
    "The blue team keeps the ball. The red team presses high up the pitch.",
    "A player of the blue team runs with the ball toward the opponent's goal.",
)

# Behaviour policies of the controlled (blue) players: name, probability of a uniform
# random action per player and step, probability that a carrier passes (short, long or
# high) this step, and whether players without the ball fall back goal-side of it.
POLICIES = (
    ("random", 1.0, 0.0, False),
    ("scripted", 0.0, 0.0, False),
    ("mixed", 0.3, 0.05, False),
    ("passing", 0.1, 0.15, False),
    ("defending", 0.1, 0.0, True),
    ("defending_mixed", 0.3, 0.05, True),
)
SCENARIOS = (
    "11_vs_11_easy_stochastic",
    "11_vs_11_hard_stochastic",
    "academy_counterattack_easy",
    "academy_counterattack_hard",
)
MAX_LOGIT_SCALE = math.log(100.0)
# The image tower: frame pixels, patches per side, layers, width and heads (MLP 4 x width).
# V-GEPF runs it on every state of training, so its cost is the shaper's: this one costs
# about an eighth of a 96 px, 8 x 8 patch, 4 x 128 tower per state on a CPU.
TOWER = dict(image_size=48, grid=4, vision_width=96, vision_layers=3, vision_heads=4)
QUICK_TOWER = dict(image_size=32, grid=8, vision_width=32, vision_layers=1, vision_heads=2)


# ----- behaviour policies -------------------------------------------------------------------
def _direction_action(move: jax.Array, min_norm: float = 0.0) -> jax.Array:
    """The move action whose direction is closest to ``move`` [P, 2] (release if none)."""
    d = jnp.argmax(move @ DIRECTIONS[1:].T, -1) + 1
    return jnp.where((move**2).sum(-1) > min_norm, d, RELEASE_DIRECTION)


def defending_actions(env: Football, state) -> jax.Array:
    """Fall back goal-side: each controlled player heads for a point between the ball and
    its own goal (defenders nearer the goal), the nearest outfield one for the ball. [C]"""
    idx = jnp.asarray(env.controlled)
    form = env.formation[idx]  # [C, 2] formation spots
    frac = 0.35 + 0.4 * (form[:, 0] + 1.0)
    goal = jnp.stack([jnp.full_like(form[:, 0], -1.0), 0.6 * form[:, 1]], -1)
    target = goal + (state.ball - goal) * frac[:, None]
    pos = state.pos[idx]
    d_ball = jnp.sqrt(((pos - state.ball) ** 2).sum(-1))
    chaser = jnp.arange(idx.shape[0]) == jnp.argmin(jnp.where(idx == 0, jnp.inf, d_ball))
    target = jnp.where(chaser[:, None], state.ball, target)
    return _direction_action(target - pos, 1e-4).astype(jnp.int32)


def policy_actions(env: Football, key, state, eps, p_pass, defend) -> jax.Array:
    """Actions [C] of one behaviour policy (see ``POLICIES``) in one state."""
    k_rand, k_mix, k_kind, k_pass = jax.random.split(key, 4)
    c = len(env.controlled)
    rand = jax.random.randint(k_rand, (c,), 0, NUM_ACTIONS)
    blue_ball = (state.owner >= 0) & (state.owner < 11)
    scripted = scripted_actions(env, state, sprint=False)
    base = jnp.where(defend & ~blue_ball, defending_actions(env, state), scripted)
    act = jnp.where(jax.random.uniform(k_mix, (c,)) < eps, rand, base)
    kinds = jnp.array([SHORT_PASS, SHORT_PASS, LONG_PASS, HIGH_PASS])
    pass_act = kinds[jax.random.randint(k_kind, (c,), 0, 4)]
    carrier = jnp.asarray(env.controlled) == state.owner
    return jnp.where(carrier & (jax.random.uniform(k_pass, (c,)) < p_pass), pass_act, act)


def rollout(env: Football, key, eps, p_pass, defend, steps: int, stride: int):
    """Vmapped episodes, one per entry of the per-env policy parameters ``eps``,
    ``p_pass``, ``defend`` [E]; every ``stride``-th state. -> states [steps // stride, E]"""
    e = eps.shape[0]
    _, state = jax.vmap(env.reset)(jax.random.split(key, e))
    act = jax.vmap(functools.partial(policy_actions, env))

    def one_step(carry, _):
        state, key = carry
        key, k_act, k_step = jax.random.split(key, 3)
        a = act(jax.random.split(k_act, e), state, eps, p_pass, defend)  # [E, C]
        actions = {ag: a[:, i] for i, ag in enumerate(env.agents)}
        _, state, _, _, _ = jax.vmap(env.step)(jax.random.split(k_step, e), state, actions)
        return (state, key), None

    def keep(carry, _):
        carry, _ = jax.lax.scan(one_step, carry, None, length=stride)
        return carry, carry[0]

    _, states = jax.lax.scan(keep, (state, key), None, length=steps // stride)
    return states


# ----- the frame data set -------------------------------------------------------------------
@dataclasses.dataclass
class Pool:
    """Candidate states of all scenarios, flattened: positions for rendering, labels."""

    pos: np.ndarray  # [N, 22, 2]
    ball: np.ndarray  # [N, 2]
    holds: np.ndarray  # [N, K] bool, predicate per skill
    heldout: np.ndarray  # [N] bool, from a held-out episode
    policy: np.ndarray  # [N] int, index into POLICIES
    scenario: np.ndarray  # [N] int, index into the scenarios used


def collect(scenarios, envs_per_policy: int, steps: int, stride: int, heldout_envs: int, seed):
    """Roll out every scenario under every policy; label each kept state. -> Pool"""
    n_pol = len(POLICIES)
    e = envs_per_policy * n_pol
    pol = np.arange(e) % n_pol  # env i runs policy i % n_pol, replica i // n_pol
    params = [jnp.asarray([POLICIES[p][j] for p in pol]) for j in (1, 2, 3)]
    held_env = (np.arange(e) // n_pol) < heldout_envs
    parts = []
    for si, name in enumerate(scenarios):
        env = Football(name)
        run = jax.jit(lambda k, env=env: rollout(env, k, *params, steps, stride))
        states = run(jax.random.fold_in(jax.random.key(seed), si))  # [T, E] leaves
        holds, _ = jax.jit(jax.vmap(jax.vmap(skill_predicates)))(states)
        t = holds.shape[0]
        parts.append(
            Pool(
                pos=np.asarray(states.pos).reshape(t * e, 22, 2),
                ball=np.asarray(states.ball).reshape(t * e, 2),
                holds=np.asarray(holds).reshape(t * e, K),
                heldout=np.tile(held_env, t),
                policy=np.tile(pol, t),
                scenario=np.full(t * e, si),
            )
        )
    return Pool(
        *(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(Pool))
    )


def balance(
    holds: np.ndarray, n: int, neutral_frac: float, rng, replace: bool = True
) -> np.ndarray:
    """Indices of about ``n`` frames: ``neutral_frac n`` where no predicate holds, the rest
    drawn so that every skill holds in about as many frames as the rarest can be given.

    Skills are visited rarest first and each is topped up to a common quota by drawing
    frames where it holds (common co-occurring skills, e.g. attack with ball location,
    mostly come along with the rare ones); the quota is raised until the skill frames
    number ``(1 - neutral_frac) n``. Rare skills repeat frames, or (``replace=False``)
    stay under the quota."""
    n_neutral = int(round(n * neutral_frac))
    want = n - n_neutral
    quota = max(want // K, 1)
    for _ in range(8):  # the count grows with the quota; a few rescalings converge
        taken = np.zeros(len(holds), bool)
        counts = np.zeros(K, int)
        chosen = []
        for k in np.argsort(holds.sum(0), kind="stable"):
            pool = np.flatnonzero(holds[:, k])
            need = quota - counts[k]
            if need <= 0 or len(pool) == 0:
                continue
            fresh = pool[~taken[pool]]
            if not replace:
                pool, need = fresh, min(need, len(fresh))
            src = fresh if len(fresh) >= need else pool
            pick = rng.choice(src, need, replace=len(src) < need)
            taken[pick] = True
            counts += holds[pick].sum(0)
            chosen.append(pick)
        got = sum(len(c) for c in chosen)
        if got >= 0.97 * want or got == 0:
            break
        quota = int(np.ceil(quota * want / got))
    chosen = [np.concatenate(chosen)[:want]] if chosen else []
    neutral = np.flatnonzero(~holds.any(1))
    if not replace:
        neutral, n_neutral = neutral[~taken[neutral]], min(n_neutral, len(neutral))
    if n_neutral and len(neutral):
        chosen.append(rng.choice(neutral, n_neutral, replace=len(neutral) < n_neutral))
    return rng.permutation(np.concatenate(chosen))


def render_all(pos: np.ndarray, ball: np.ndarray, size: int, chunk: int = 256) -> np.ndarray:
    """uint8 frames [N, size, size, 3] of the states given by ``pos``, ``ball``."""

    @jax.jit
    def draw(p, b):
        return jax.vmap(lambda p, b: render(_Drawn(p, b), size))(p, b)

    out = []
    for i in range(0, len(pos), chunk):
        p, b = pos[i : i + chunk], ball[i : i + chunk]
        pad = chunk - len(p)  # one compiled shape for every chunk
        p = np.concatenate([p, np.repeat(p[-1:], pad, 0)])
        b = np.concatenate([b, np.repeat(b[-1:], pad, 0)])
        out.append(np.asarray(draw(p, b))[: chunk - pad])
    return np.concatenate(out)


@dataclasses.dataclass(frozen=True)
class _Drawn:
    """What ``render`` reads of a state."""

    pos: jax.Array
    ball: jax.Array


def targets_of(holds: np.ndarray) -> np.ndarray:
    """Caption targets [N, K + 1]: the true skills, or the neutral caption if none."""
    return np.concatenate([holds, ~holds.any(1, keepdims=True)], 1).astype(np.float32)


# ----- tokenizer ----------------------------------------------------------------------------
def train_tokenizer(texts, vocab_size: int = 1024) -> tuple[dict[str, int], list[tuple]]:
    """Byte-level BPE trained on ``texts`` with CLIP's text pipeline, laid out as OpenAI's
    vocabulary (byte symbols, the same with ``</w>``, merges, then the two specials, so
    ``<|endoftext|>`` has the largest id). -> (vocab, merges)"""
    from tokenizers import models, trainers

    tok = build_bpe({BOS: 0, EOS: 1}, [])  # CLIP's normaliser and pre-tokeniser
    tok.model = models.BPE(continuing_subword_prefix="", end_of_word_suffix="</w>")
    symbols = list(bytes_to_unicode().values())
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        show_progress=False,
        initial_alphabet=symbols,
        end_of_word_suffix="</w>",
    )
    tok.train_from_iterator(texts, trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]
    words = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    words = list(dict.fromkeys(words))  # a merge never recreates a base symbol; be safe
    vocab = {w: i for i, w in enumerate([*words, BOS, EOS])}
    return vocab, merges


def write_tokenizer(out: pathlib.Path, vocab: dict[str, int], merges) -> None:
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in merges]
    (out / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


# ----- model and training -------------------------------------------------------------------
def model_config(
    image_size: int,
    vocab_size: int,
    quick: bool = False,
    *,
    grid: int | None = None,
    vision_width: int | None = None,
    vision_layers: int | None = None,
    vision_heads: int | None = None,
    vision_mlp: int | None = None,
) -> CLIPConfig:
    """The small ViT CLIP: an image tower of ``grid x grid`` patches and ``vision_*``
    (``TOWER``'s, or ``QUICK_TOWER``'s with ``quick``, where not given; MLP 4 x width),
    and 3 x 128 text layers (1 x 32 with ``quick``), joint embedding as wide as the text
    tower. ``<|endoftext|>`` is the last vocabulary entry."""
    tower = QUICK_TOWER if quick else TOWER
    w, tl, heads = (32, 1, 2) if quick else (128, 3, 4)
    grid = grid or tower["grid"]
    if image_size % grid:
        raise ValueError(f"image size {image_size} is not a multiple of the grid {grid}")
    vw = vision_width or tower["vision_width"]
    return CLIPConfig(
        embed_dim=w,
        image_size=image_size,
        patch_size=image_size // grid,
        vision_width=vw,
        vision_layers=vision_layers or tower["vision_layers"],
        vision_heads=vision_heads or tower["vision_heads"],
        vision_mlp_dim=vision_mlp or 4 * vw,
        context_length=32,
        vocab_size=vocab_size,
        text_width=w,
        text_layers=tl,
        text_heads=heads,
        text_mlp_dim=4 * w,
        eot_token_id=vocab_size - 1,
    )


def contrastive_loss(logits: jax.Array, targets: jax.Array) -> tuple[jax.Array, dict]:
    """Multi-positive symmetric InfoNCE of ``logits`` [B, C] (images x distinct captions)
    with ``targets`` [B, C] in {0, 1}, every row with at least one positive (the module
    docstring). Captions with no positive image in the batch skip the text -> image term."""
    per_img = targets / targets.sum(1, keepdims=True)
    i2t = -(per_img * jax.nn.log_softmax(logits, 1)).sum(1).mean()
    col = targets.sum(0)  # [C]
    present = col > 0
    per_txt = targets / jnp.maximum(col, 1.0)
    t2i_c = -(per_txt * jax.nn.log_softmax(logits, 0)).sum(0)  # [C]
    t2i = jnp.where(present, t2i_c, 0.0).sum() / jnp.maximum(present.sum(), 1)
    return 0.5 * (i2t + t2i), {"i2t": i2t, "t2i": t2i}


def make_train_step(cfg: CLIPConfig, opt):
    """Jitted ``(params, opt_state, key, images_u8, tokens, targets) -> (params, opt_state,
    loss, aux)``: random vertical flips, the loss, an optimiser step, the scale clamp."""

    def loss_fn(params, images, tokens, targets):
        return contrastive_loss(logits(cfg, params, images, tokens), targets)

    @jax.jit
    def step(params, opt_state, key, images_u8, tokens, targets):
        flip = jax.random.bernoulli(key, 0.5, (images_u8.shape[0], 1, 1, 1))
        images = images_u8.astype(jnp.float32) / 255.0
        images = jnp.where(flip, images[:, ::-1], images)  # y -> -y
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, images, tokens, targets
        )
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        params = {**params, "logit_scale": jnp.minimum(params["logit_scale"], MAX_LOGIT_SCALE)}
        return params, opt_state, loss, aux

    return step


def make_optimizer(lr: float, steps: int, weight_decay: float = 0.05):
    """AdamW (decay on matrices only) with linear warm-up and cosine decay, clipped."""
    sched = optax.warmup_cosine_decay_schedule(
        0.0, lr, max(1, steps // 10), max(steps, 2), end_value=0.05 * lr
    )
    mask = lambda p: jax.tree.map(lambda x: x.ndim >= 2, p)  # noqa: E731
    return optax.chain(
        optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=weight_decay, mask=mask)
    )


def embed_frames(cfg: CLIPConfig, params, frames_u8: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Unit-norm image embeddings [N, D] of uint8 frames."""
    enc = jax.jit(lambda p, x: encode_image(cfg, p, x.astype(jnp.float32) / 255.0))
    out = []
    for i in range(0, len(frames_u8), chunk):
        x = frames_u8[i : i + chunk]
        pad = chunk - len(x)
        x = np.concatenate([x, np.repeat(x[-1:], pad, 0)])
        out.append(np.asarray(enc(params, x))[: chunk - pad])
    e = np.concatenate(out)
    return e / np.linalg.norm(e, axis=-1, keepdims=True)


def caption_cosines(clip, frames_u8: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Cosines ``[N, K + 1]`` of uint8 frames with the captions (``CAPTIONS`` order) under
    the loaded CLIP ``clip``."""
    tokens = jnp.asarray(clip.tokenizer(list(CAPTIONS)))
    txt = np.asarray(jax.jit(functools.partial(encode_text, clip.config))(clip.params, tokens))
    txt = txt / np.linalg.norm(txt, axis=-1, keepdims=True)
    return embed_frames(clip.config, clip.params, frames_u8, chunk) @ txt.T


def _auc(pos: np.ndarray, neg: np.ndarray) -> float | None:
    """ROC AUC of scores ``pos`` above ``neg`` (probability a positive outranks a negative)."""
    if len(pos) == 0 or len(neg) == 0:
        return None
    from scipy.stats import rankdata

    r = rankdata(np.concatenate([pos, neg]))
    return float((r[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def evaluate(cos: np.ndarray, holds: np.ndarray) -> dict:
    """Retrieval and cosine statistics of image-caption cosines ``cos`` [N, K + 1] (the
    seven instructions, then the neutral caption) for frames with predicates ``holds``.

    Per skill k, over the frames where k holds: ``top1`` is the fraction where k's
    instruction beats every instruction whose predicate is false (other true skills are
    also correct answers, so they are not competitors; on single-label frames this is
    plain top-1 of 7), ``chance`` its expectation for random scores, ``top1_of_7`` the
    fraction where k is the top-1 of all seven; then the mean cosine of k's instruction
    on frames where k holds and where it does not, their gap, and the ROC AUC of that
    cosine separating the two."""
    skills = cos[:, :K]
    out = {}
    for k, name in enumerate(SKILL_NAMES):
        t = holds[:, k]
        s, rows = skills[t], holds[t]
        rival = np.where(rows, -np.inf, s)  # [n, K] false skills only
        rival[:, k] = -np.inf
        n_false = (~rows).sum(1)
        pos, neg = skills[t, k], skills[~t, k]
        out[name] = {
            "n_true": int(t.sum()),
            "n_false": int((~t).sum()),
            "top1": float((s[:, k] > rival.max(1)).mean()) if t.any() else None,
            "chance": float((1.0 / (1 + n_false)).mean()) if t.any() else None,
            "top1_of_7": float((s.argmax(1) == k).mean()) if t.any() else None,
            "single_label_frames": int((rows.sum(1) == 1).sum()),
            "mean_cos_true": float(pos.mean()) if len(pos) else None,
            "mean_cos_false": float(neg.mean()) if len(neg) else None,
            "cos_gap": float(pos.mean() - neg.mean()) if len(pos) and len(neg) else None,
            "auc": _auc(pos, neg),
        }
    any_true = holds.any(1)
    best = skills.argmax(1)
    summary = {
        "frames": int(len(holds)),
        "top1_is_a_true_skill": float(holds[any_true, best[any_true]].mean()),
        "neutral_frames_top1_is_neutral": float((cos[~any_true].argmax(1) == K).mean())
        if (~any_true).any()
        else None,
    }
    return {"per_skill": out, "summary": summary}


# ----- report -------------------------------------------------------------------------------
def _fmt(x, spec=".2f") -> str:
    return "-" if x is None else format(x, spec)


def readme(report: dict, out: pathlib.Path) -> str:
    """README.md of the output directory ``out``: what it is, how it was made, the numbers."""
    per = report["heldout"]["per_skill"]
    rows = [
        f"| {name} | {v['n_true']} | {_fmt(v['top1'])} | {_fmt(v['chance'])} | "
        f"{_fmt(v['top1_of_7'])} | {_fmt(v['mean_cos_true'], '.3f')} | "
        f"{_fmt(v['mean_cos_false'], '.3f')} | {_fmt(v['cos_gap'], '+.3f')} | {_fmt(v['auc'])} |"
        for name, v in per.items()
    ]
    ds = report["dataset"]
    cfg = report["config"]["model"]
    grid = cfg["image_size"] // cfg["patch_size"]
    s = report["heldout"]["summary"]
    out = out.resolve()
    if out == (ROOT / DEFAULT_CLIP_DIR).resolve():
        role = (
            "V-GEPF's default potential when no other CLIP is given (`shaping.kwargs.clip_weights`)"
        )
    else:
        where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
        role = f"V-GEPF's potential with `shaping.kwargs.clip_weights={where}`"
    return "\n".join(
        [
            "# Football CLIP for V-GEPF",
            "",
            "A small CLIP (ViT image tower, causal text tower) trained contrastively on frames of",
            "our football game captioned by V-GEPF's skill predicates",
            f"(`jaxmarl_llm/methods/vgepf/predicates.py`): {role}. A Hugging Face CLIP",
            "directory: `jaxmarl_llm.vision.clip.load_clip(this_dir)` reads it (weights stored",
            "in float16, read as float32). Frames: `envs.football.render.render(state, "
            f"{cfg['image_size']})`.",
            "",
            f"Made by `{report['command']}` in {report['wall_time_s'] / 60:.1f} min "
            f"({report['train']['steps']} steps of {report['train']['batch']} frames; "
            "2-core CPU shared with other jobs).",
            "",
            f"Model: image {cfg['image_size']} px in {grid} x {grid} patches of "
            f"{cfg['patch_size']} px, vision {cfg['vision_layers']} layers x "
            f"{cfg['vision_width']} ({cfg['vision_heads']} heads, MLP {cfg['vision_mlp_dim']}; "
            f"{report['config']['image_tower_parameters']:,} parameters), text "
            f"{cfg['text_layers']} x "
            f"{cfg['text_width']}, context {cfg['context_length']}, embedding "
            f"{cfg['embed_dim']}, vocabulary {cfg['vocab_size']} "
            f"({report['config']['parameters']:,} parameters).",
            "",
            f"Data: {ds['train_frames']} training and {ds['heldout_frames']} held-out frames "
            f"(from {ds['pool_states']} candidate states of {len(ds['scenarios'])} scenarios "
            f"x {len(ds['policies'])} behaviour policies; held-out frames come from separate "
            "episodes), balanced so every skill holds in at least "
            f"{ds['min_train_frames_per_skill']} training frames; frames where no predicate "
            "holds are "
            f'captioned "{NEUTRAL_CAPTION}" ({ds["neutral_fraction"]:.0%}). Loss: symmetric '
            "multi-positive InfoNCE over the batch and the eight distinct captions, learned "
            "temperature (see `experiments/train_clip.py`).",
            "",
            "Held-out evaluation per skill (frames where the skill's predicate holds):",
            "`top1` = the skill's instruction ranks above every instruction whose predicate is",
            "false (plain top-1 of 7 on single-label frames); `chance` = its expectation for",
            "random scores; `top1 of 7` = top-1 among all seven; cosines of the skill's",
            "instruction on frames where the predicate holds / does not, their gap, and the ROC",
            "AUC of that cosine (the potential's ability to rank true above false frames).",
            "",
            "| skill | frames | top1 | chance | top1 of 7 | cos true | cos false | gap | AUC |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Frames with a true predicate whose top-1 instruction is a true one: "
            f"{s['top1_is_a_true_skill']:.2f}; neutral frames whose best caption is the "
            f"neutral one: {_fmt(s['neutral_frames_top1_is_neutral'])}.",
            "",
            "Limits: a frame shows positions only, not velocities, so the motion parts of",
            "'encourage dribbling' (the carrier moves) and 'encourage passing' (the ball rolls",
            "after a blue pass) are visible only through where the ball lies relative to the",
            "players. `report.json` has all numbers, the loss curve and the data set counts.",
            "",
        ]
    )


# ----- main ---------------------------------------------------------------------------------
def evaluate_only(args, pos, ball, holds, chunk: int) -> dict:
    """``--evaluate DIR``: the held-out figures of the CLIP in DIR on this run's held-out
    states (the frames a training run with the same data options holds out), drawn at
    DIR's image size; one JSON line on stdout."""
    clip = load_clip(args.evaluate)
    if clip.tokenizer is None:
        raise SystemExit(
            f"--evaluate {args.evaluate}: no tokenizer files (vocab.json + merges.txt)"
        )
    frames = render_all(pos, ball, clip.config.image_size, chunk)
    result = {
        "model": str(args.evaluate),
        "image_size": clip.config.image_size,
        "seed": args.seed,
        "frames_option": args.frames,
        "heldout": evaluate(caption_cosines(clip, frames, chunk), holds),
    }
    print(json.dumps(result))
    return result


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / DEFAULT_CLIP_DIR), help="output directory")
    ap.add_argument("--steps", type=int, default=None, help="training steps (500; quick 3)")
    ap.add_argument("--frames", type=int, default=None, help="training frames (12000; quick 64)")
    ap.add_argument("--image-size", type=int, default=None, help="frame size (48; quick 32)")
    ap.add_argument("--grid", type=int, default=None, help="patches per side (4; quick 8)")
    ap.add_argument("--vision-width", type=int, default=None, help="image tower (96; quick 32)")
    ap.add_argument("--vision-layers", type=int, default=None, help="(3; quick 1)")
    ap.add_argument("--vision-heads", type=int, default=None, help="(4; quick 2)")
    ap.add_argument("--vision-mlp", type=int, default=None, help="MLP width (4 x vision width)")
    ap.add_argument("--batch", type=int, default=None, help="batch size (128; quick 16)")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--neutral", type=float, default=0.125, help="share of neutral frames")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a tiny run (tests)")
    ap.add_argument(
        "--evaluate",
        default=None,
        metavar="DIR",
        help="no training: score the CLIP in DIR on the held-out frames of these options",
    )
    args = ap.parse_args(argv)
    q = args.quick
    defaults = {"steps": (500, 3), "frames": (12000, 64), "batch": (128, 16)}
    defaults |= {name: (TOWER[name], QUICK_TOWER[name]) for name in TOWER}
    for name, (full, quick) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    if args.vision_mlp is None:
        args.vision_mlp = 4 * args.vision_width
    for name in (*defaults, "vision_mlp"):
        if getattr(args, name) < 1:
            raise SystemExit(
                f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}"
            )
    if args.image_size % args.grid:
        raise SystemExit(
            f"--image-size {args.image_size} must be a multiple of --grid {args.grid} "
            "(square patches)"
        )
    if args.vision_width % args.vision_heads:
        raise SystemExit(
            f"--vision-width {args.vision_width} must be a multiple of --vision-heads "
            f"{args.vision_heads}"
        )
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    t0 = time.time()
    out = pathlib.Path(args.out)
    if args.evaluate is None:
        out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    timings = {}

    # 1. candidate states and their predicates
    if args.quick:
        scen, per_policy, steps, stride, held = SCENARIOS[2:3], 2, 24, 2, 1
    else:
        scen, per_policy, steps, stride, held = SCENARIOS, 24, 400, 5, 3
    pool = collect(scen, per_policy, steps, stride, held, args.seed)
    timings["rollouts_s"] = time.time() - t0
    print(f"{len(pool.holds)} candidate states in {timings['rollouts_s']:.0f} s", flush=True)

    # 2. balanced training and held-out frames
    n_held = max(args.frames // 6, 24)
    tr_pool, ho_pool = np.flatnonzero(~pool.heldout), np.flatnonzero(pool.heldout)
    tr = tr_pool[balance(pool.holds[tr_pool], args.frames, args.neutral, rng)]
    # held-out frames are distinct states (no repeats): rare skills may fall short
    ho = ho_pool[balance(pool.holds[ho_pool], n_held, args.neutral, rng, replace=False)]
    chunk = min(256, len(tr))  # one compiled batch shape for rendering and embedding
    if args.evaluate is not None:
        return evaluate_only(args, pool.pos[ho], pool.ball[ho], pool.holds[ho], chunk)
    t = time.time()
    frames_tr = render_all(pool.pos[tr], pool.ball[tr], args.image_size, chunk)
    frames_ho = render_all(pool.pos[ho], pool.ball[ho], args.image_size, chunk)
    timings["render_s"] = time.time() - t
    print(f"{len(tr)} + {len(ho)} frames rendered in {timings['render_s']:.0f} s", flush=True)
    y_tr = targets_of(pool.holds[tr])

    # 3. tokenizer
    vocab, merges = train_tokenizer([*CAPTIONS, *FOOTBALL_TEXT])
    write_tokenizer(out, vocab, merges)
    cfg = model_config(
        args.image_size,
        len(vocab),
        args.quick,
        grid=args.grid,
        vision_width=args.vision_width,
        vision_layers=args.vision_layers,
        vision_heads=args.vision_heads,
        vision_mlp=args.vision_mlp,
    )
    tokenizer = CLIPTokenizer.from_directory(out, cfg.context_length)
    tokens = jnp.asarray(tokenizer(list(CAPTIONS)))  # [K + 1, context]
    assert tokenizer.eos_id == cfg.eot_token_id

    # 4. training
    # one compiled program: eager initialisation dispatches op by op and is slower
    params = jax.jit(functools.partial(init_params, cfg))(jax.random.key(args.seed))
    opt = make_optimizer(args.lr, args.steps)
    opt_state = opt.init(params)
    step_fn = make_train_step(cfg, opt)
    key = jax.random.key(args.seed + 1)
    losses, order, cursor = [], rng.permutation(len(tr)), 0
    t = time.time()
    log_every = max(1, args.steps // 30)
    for i in range(args.steps):
        if cursor + args.batch > len(order):
            order, cursor = rng.permutation(len(tr)), 0
        idx = order[cursor : cursor + args.batch]
        cursor += args.batch
        key, k = jax.random.split(key)
        params, opt_state, loss, aux = step_fn(
            params, opt_state, k, frames_tr[idx], tokens, y_tr[idx]
        )
        if i % log_every == 0 or i == args.steps - 1:
            rec = {"step": i, "loss": float(loss), "i2t": float(aux["i2t"])}
            rec |= {
                "t2i": float(aux["t2i"]),
                "temperature_scale": float(jnp.exp(params["logit_scale"])),
            }
            losses.append(rec)
            print(f"step {i:5d} loss {rec['loss']:.4f} ({time.time() - t:.0f} s)", flush=True)
    timings["train_s"] = time.time() - t

    # 5. save, reload (the report describes the stored float16 checkpoint) and evaluate
    save_clip(out, cfg, params, dtype=np.float16)
    clip = load_clip(out)
    t = time.time()
    # held-out frames and as many training frames (to compare), embedded in one pass
    cos = caption_cosines(clip, np.concatenate([frames_ho, frames_tr[: len(ho)]]), chunk)
    heldout = evaluate(cos[: len(ho)], pool.holds[ho])
    train_eval = evaluate(cos[len(ho) :], pool.holds[tr[: len(ho)]])
    timings["eval_s"] = time.time() - t

    def counts(idx):
        h = pool.holds[idx]
        return {
            "frames": int(len(idx)),
            "unique_states": int(len(np.unique(idx))),
            "per_skill": {n: int(h[:, k].sum()) for k, n in enumerate(SKILL_NAMES)},
            "neutral": int((~h.any(1)).sum()),
            "labels_per_frame": float(h.sum(1).mean()),
        }

    report = {
        "command": " ".join(
            ["python experiments/train_clip.py"]
            + [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)]
        ),
        "wall_time_s": time.time() - t0,
        "timings_s": timings,
        "captions": {**{n: s.instruction for n, s in zip(SKILL_NAMES, SKILLS, strict=True)}},
        "neutral_caption": NEUTRAL_CAPTION,
        "config": {
            "model": dataclasses.asdict(cfg),
            "parameters": int(sum(x.size for x in jax.tree.leaves(params))),
            "image_tower_parameters": int(
                sum(x.size for x in jax.tree.leaves(image_params(params)))
            ),
            "weights_dtype": "float16",
        },
        "train": {
            "steps": args.steps,
            "batch": args.batch,
            "lr": args.lr,
            "weight_decay": 0.05,
            "seed": args.seed,
            "final_temperature_scale": float(jnp.exp(params["logit_scale"])),
        },
        "dataset": {
            "scenarios": list(scen),
            "policies": [p[0] for p in POLICIES],
            "envs_per_policy_and_scenario": per_policy,
            "rollout_steps": steps,
            "stride": stride,
            "pool_states": int(len(pool.holds)),
            "pool_per_skill": {n: int(pool.holds[:, k].sum()) for k, n in enumerate(SKILL_NAMES)},
            "pool_neutral": int((~pool.holds.any(1)).sum()),
            "min_train_frames_per_skill": int(pool.holds[tr].sum(0).min()),
            "neutral_fraction": args.neutral,
            "train_frames": int(len(tr)),
            "heldout_frames": int(len(ho)),
            "train": counts(tr),
            "heldout": counts(ho),
        },
        "losses": losses,
        "heldout": heldout,
        "train_subset": train_eval,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "README.md").write_text(readme(report, out))
    for name, v in heldout["per_skill"].items():
        print(
            f"{name:20s} top1 {_fmt(v['top1'])} (chance {_fmt(v['chance'])}) "
            f"gap {_fmt(v['cos_gap'], '+.3f')} auc {_fmt(v['auc'])}"
        )
    print(f"wrote {out} in {report['wall_time_s']:.0f} s")
    return report


if __name__ == "__main__":
    main()
