"""Push-T as LeRobot evaluates it, outside the plugin, and a scripted policy that sees only pixels.

``reference_episodes`` is a rollout loop written from the description of LeRobot's ``rollout`` and
``eval_policy`` (``src/lerobot/scripts/lerobot_eval.py``) for one env: the env built as LeRobot's
``PushtEnv`` config builds it (``gym.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos",
render_mode="rgb_array", max_episode_steps=300)``, env checker off), ``reset(seed=1000 + i)``, then
the policy's action passed to ``step`` unchanged until ``terminated`` or ``truncated``; an episode
succeeds if ``info["is_success"]`` was true at any step, and its ``max_reward`` is the largest step
reward. LeRobot clips no action: gym-pusht takes any (x, y) as the pusher's target, and the pusher
(a kinematic body) goes there, through the walls if the target lies beyond them.

``Pusher`` is a deterministic scripted policy (``--policy=pusht_reference:Pusher``). From the
96x96 image alone it fits the pose of the T-shaped block and of the T-shaped target (colours
from gym-pusht's renderer), then pushes the block with the round pusher at the point of its outline
whose push best moves it toward the target's position and angle. What it knows beforehand comes
from gym-pusht's source (the T's shape, mass and moment, the renderer's colours and scaling); of an
episode it reads the two observation keys only, never the env's state or info. With gym-pusht
0.1.8 it solves all 50 of the protocol's seeds (1000-1049), in 150 steps on average.

With ``$VLAEVAL_DIGEST_DIR`` set, ``Pusher`` writes each episode's digest (``episode_digest``: a
SHA-256 over every observation it saw and every action it took, with the outcome) to
``<task>-<seed>.json`` there, for bit-for-bit comparison with the reference loop.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from episode_digest import DigestingPolicy

POLICY_KEYS = ("pixels", "agent_pos")
MAX_STEPS = 300

# --- What the image shows (gym_pusht/envs/pusht.py and pymunk_override.py, gym-pusht 0.1.8) --------------------
SIZE = 96
CANVAS = 512
SCALE = CANVAS / SIZE
# cv2.resize (linear) makes observation pixel u from canvas coordinate (u + 0.5) * 512/96 - 0.5,
# interpolating between its two neighbouring canvas pixels.
SOURCE = (np.arange(SIZE) + 0.5) * SCALE - 0.5
LOW = np.floor(SOURCE)
FRAC = SOURCE - LOW
PALETTE = np.array(
    [
        (255, 255, 255),  # background
        (211, 211, 211),  # walls: LightGray
        (144, 238, 144),  # target: LightGreen, a filled polygon
        (143, 163, 184),  # block: LightSlateGray lightened by 1.2 inside ...
        (119, 136, 153),  # ... and LightSlateGray on a 4-pixel outline
        (65, 105, 225),  # pusher: RoyalBlue rim ...
        (78, 126, 255),  # ... lightened inside
    ],
    dtype=np.float32,
)
BACKGROUND, TARGET, BLOCK, PUSHER = 0, 1, 2, 3
LABELS = np.array([BACKGROUND, BACKGROUND, TARGET, BLOCK, BLOCK, PUSHER, PUSHER])
BLOCK_OUTLINE = 2.0
"""The block is drawn with its outline centred on its edges: it shows 2 canvas pixels larger."""

# --- The T (body frame: origin mid-top of the bar, stem along +y) and the pusher --------------------------------
BOXES = np.array([[0.0, 15.0, 60.0, 15.0], [0.0, 75.0, 15.0, 45.0]])  # centre x, y, half width, half height
AREA_CENTRE = np.array([0.0, (3600 * 15 + 2700 * 75) / 6300])
CENTRE_OF_GRAVITY = np.array([0.0, 45.0])
GYRATION = np.sqrt(3000.0)  # sqrt(moment / mass) of the block
PUSHER_RADIUS = 15.0
AROUND = 110.0
"""Radius around the block's centre of gravity that the pusher travels on, clear of the block."""
LOW_TARGET, HIGH_TARGET = 10.0, 502.0
"""Where the pusher is sent: inside the walls (it would pass through them: its body is kinematic)."""
APPROACH = (40.0, 30.0, 20.0, 12.0)
"""How far back from a contact the pusher lines up before pushing, the first that is on the table."""


def on_table(point: np.ndarray) -> bool:
    """Whether the pusher may be sent to ``point``."""
    return bool(((point >= LOW_TARGET) & (point <= HIGH_TARGET)).all())


def wrap(angle: float) -> float:
    """``angle`` in [-pi, pi)."""
    return float((angle + np.pi) % (2 * np.pi) - np.pi)


def rotate(angle: float | np.ndarray, v: np.ndarray) -> np.ndarray:
    """Vectors ``v`` (..., 2) turned by ``angle``, as pymunk turns a body's points."""
    c, s = np.cos(angle), np.sin(angle)
    return np.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], axis=-1)


def to_world(pose: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Body-frame points ``v`` of a T at ``pose`` (x, y, angle) in canvas coordinates."""
    return pose[:2] + rotate(pose[2], v)


def t_distance(x: np.ndarray, y: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """Signed distance from world points to the T at ``pose`` (negative inside)."""
    c, s = np.cos(pose[2]), np.sin(pose[2])
    dx, dy = x - pose[0], y - pose[1]
    bx, by = c * dx + s * dy, -s * dx + c * dy
    out = None
    for cx, cy, hx, hy in BOXES:
        qx = np.abs(bx - cx) - hx
        qy = np.abs(by - cy) - hy
        d = np.hypot(np.maximum(qx, 0), np.maximum(qy, 0)) + np.minimum(np.maximum(qx, qy), 0)
        out = d if out is None else np.minimum(out, d)
    return out


def _nearest_label() -> np.ndarray:
    """BACKGROUND, TARGET, BLOCK or PUSHER for every colour (8 levels a channel): its nearest palette colour's."""
    levels = np.arange(4.0, 256.0, 8.0)
    colours = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), -1)
    return LABELS[((colours[..., None, :] - PALETTE) ** 2).sum(-1).argmin(-1)]


NEAREST_LABEL = _nearest_label()


def labels(pixels: np.ndarray) -> np.ndarray:
    """Each pixel's nearest palette colour, as BACKGROUND, TARGET, BLOCK or PUSHER."""
    levels = pixels >> 3
    return NEAREST_LABEL[levels[..., 0], levels[..., 1], levels[..., 2]]


def grow(mask: np.ndarray) -> np.ndarray:
    """``mask`` and its 8 neighbours."""
    out = mask.copy()
    out[1:] |= mask[:-1]
    out[:-1] |= mask[1:]
    out[:, 1:] |= out[:, :-1].copy()
    out[:, :-1] |= out[:, 1:].copy()
    return out


def shrink(mask: np.ndarray) -> np.ndarray:
    """``mask`` without its pixels next to one outside it."""
    return ~grow(~mask)


class Evidence:
    """Pixels of the image where a T's coverage is known (``rows``, ``cols``) and that coverage."""

    def __init__(self, rows: np.ndarray, cols: np.ndarray, coverage: np.ndarray, dilate: float) -> None:
        self.coverage, self.dilate, self.count = coverage, dilate, len(rows)
        xs, ys, weights = [], [], []
        for dy in (0, 1):
            for dx in (0, 1):
                xs.append(LOW[cols] + dx)
                ys.append(LOW[rows] + dy)
                weights.append((FRAC[cols] if dx else 1 - FRAC[cols]) * (FRAC[rows] if dy else 1 - FRAC[rows]))
        self.x, self.y, self.weight = np.concatenate(xs), np.concatenate(ys), np.concatenate(weights)

    def losses(self, poses: np.ndarray) -> np.ndarray:
        """For each pose, the squared difference between what the image shows and the T there as
        gym-pusht renders it (canvas pixels filled inside, then linear resizing)."""
        distance = t_distance(self.x[None], self.y[None], poses.T[:, :, None])
        canvas = np.clip(0.5 - distance + self.dilate, 0.0, 1.0) * self.weight
        predicted = canvas.reshape(len(poses), 4, self.count).sum(axis=1)
        return ((predicted - self.coverage) ** 2).sum(axis=1)

    def loss(self, pose: np.ndarray) -> float:
        """``losses`` of one pose."""
        return float(self.losses(np.asarray(pose, dtype=float)[None])[0])

    def refine(self, pose: np.ndarray, step: float = 2.0, until: float = 0.05) -> np.ndarray:
        """A compass search from ``pose``: steps of ``step`` canvas pixels (and degrees) along each
        axis, to the best of the six while it improves, halved to ``until``."""
        pose = np.asarray(pose, dtype=float).copy()
        cost = self.loss(pose)
        moves = np.concatenate([np.diag([1.0, 1.0, np.pi / 180]), -np.diag([1.0, 1.0, np.pi / 180])])
        while step >= until:
            trials = pose + step * moves
            costs = self.losses(trials)
            best = int(np.argmin(costs))
            if costs[best] < cost:
                pose, cost = trials[best], float(costs[best])
            else:
                step /= 2
        return pose

    def refine_around(self, pose: np.ndarray, spread: float, step: float) -> np.ndarray:
        """``refine`` from ``pose`` and from eight points ``spread`` pixels around it, the best: the
        loss has shallow local minima a pixel or so apart (the image samples every 5.3 pixels)."""
        offsets = np.array([(dx, dy, 0.0) for dx in (-spread, 0.0, spread) for dy in (-spread, 0.0, spread)])
        found = [self.refine(np.asarray(pose, dtype=float) + offset, step=step) for offset in offsets]
        return min(found, key=self.loss)


def window(mask: np.ndarray, margin: int) -> np.ndarray:
    """The rows and columns around ``mask``'s pixels, as a boolean image."""
    out = np.zeros_like(mask)
    rows, cols = np.nonzero(mask)
    if len(rows):
        top, left = max(rows.min() - margin, 0), max(cols.min() - margin, 0)
        out[top : rows.max() + margin + 1, left : cols.max() + margin + 1] = True
    return out


def coarse_pose(rows: np.ndarray, cols: np.ndarray, inside: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The T pose that best explains pixels ``inside`` (the T shows there) without covering pixels
    that are not ``allowed`` (``allowed`` beyond ``inside``: occluded, unknown), every 5 degrees: with
    the T centred on the shown pixels, else (a T partly hidden) anywhere within 48 pixels of them."""
    x, y = SOURCE[cols[inside]], SOURCE[rows[inside]]
    allowed_image = np.zeros((SIZE, SIZE), bool)
    allowed_image[rows[allowed], cols[allowed]] = True
    body = np.stack(np.meshgrid(np.arange(-57.0, 58.0, 6.0), np.arange(3.0, 118.0, 6.0)), -1).reshape(-1, 2)
    body = body[t_distance(body[:, 0], body[:, 1], np.zeros(3)) < -2]
    angles = np.deg2rad(np.arange(-180.0, 180.0, 5.0))
    best_cost, best = np.inf, np.zeros(3)
    for offsets in (np.zeros(1), np.arange(-48.0, 49.0, 8.0)):
        ox, oy, angle = (a.ravel() for a in np.meshgrid(offsets, offsets, angles))
        centre = rotate(angle, np.broadcast_to(AREA_CENTRE, (len(angle), 2)))
        poses = np.column_stack([x.mean() + ox - centre[:, 0], y.mean() + oy - centre[:, 1], angle])
        # T points on pixels known to show something else, plus shown pixels the T leaves out.
        points = poses[:, None, :2] + rotate(poses[:, 2:3], body[None])
        u = np.clip(np.round((points[..., 0] + 0.5) / SCALE - 0.5).astype(int), 0, SIZE - 1)
        v = np.clip(np.round((points[..., 1] + 0.5) / SCALE - 0.5).astype(int), 0, SIZE - 1)
        costs = (~allowed_image[v, u]).sum(axis=1) + (t_distance(x[None], y[None], poses.T[:, :, None]) > 3).sum(axis=1)
        if costs.min() < best_cost:
            best_cost, best = float(costs.min()), poses[int(np.argmin(costs))]
        if best_cost <= 2 or not (allowed & ~inside).any():
            break
    return best


def _contact_points() -> tuple[np.ndarray, np.ndarray]:
    """Points of the T's outline (body frame, every 5 pixels) with their inward normals, where the
    pusher fits and can come in along the normal without touching the block elsewhere."""
    edges = [
        ((-60, 0), (60, 0), (0, 1)),
        ((60, 0), (60, 30), (-1, 0)),
        ((-60, 0), (-60, 30), (1, 0)),
        ((15, 30), (60, 30), (0, -1)),
        ((-60, 30), (-15, 30), (0, -1)),
        ((15, 30), (15, 120), (-1, 0)),
        ((-15, 30), (-15, 120), (1, 0)),
        ((-15, 120), (15, 120), (0, -1)),
    ]
    points, normals = [], []
    for a, b, n in edges:
        a, b, n = np.array(a, float), np.array(b, float), np.array(n, float)
        for t in np.linspace(0.0, 1.0, int(np.linalg.norm(b - a) // 5) + 1):
            p = a + t * (b - a)
            back = np.linspace(0.0, 80.0, 81)
            ray = p - n * (PUSHER_RADIUS + back)[:, None]
            if (t_distance(ray[:, 0], ray[:, 1], np.zeros(3)) >= PUSHER_RADIUS + np.minimum(back, 3.0) - 1e-6).all():
                points.append(p)
                normals.append(n)
    return np.array(points), np.array(normals)


CONTACT_POINTS, CONTACT_NORMALS = _contact_points()


class Pusher(DigestingPolicy):
    """Scripted Push-T policy on what LeRobot's policies see (``pixels`` and ``agent_pos``): fit
    the block's and the target's poses in the image, then push the block where a push moves it
    most toward the target (position and angle). Deterministic; no state crosses episodes."""

    KEYS, IMAGE = POLICY_KEYS, "pixels"
    config: ClassVar[dict[str, Any]] = {"kind": "scripted", "inputs": list(POLICY_KEYS)}

    def reset(self, episode: Any) -> None:
        super().reset(episode)
        self.block: np.ndarray | None = None
        self.target: np.ndarray | None = None
        self.target_seen = np.zeros((SIZE, SIZE), float)
        self.target_known = np.zeros((SIZE, SIZE), bool)
        self.target_evidence = 0
        self.contact: int | None = None
        self.centroid = np.zeros(2)

    def decide(self, obs: dict[str, Any]) -> np.ndarray:
        self.perceive(np.asarray(obs["pixels"]))
        return self.plan(np.asarray(obs["agent_pos"], dtype=float))

    # --- perception ---------------------------------------------------------------------------------------------
    def perceive(self, pixels: np.ndarray) -> None:
        """Update the block's pose (tracked from the last image) and the target's (refit when more
        of it has been seen)."""
        lab = labels(pixels)
        colour = pixels.astype(np.float32)
        block = lab == BLOCK
        pusher = grow(grow(lab == PUSHER))
        # Only the block's colours (and the pusher's, left out) have more blue than red: how much
        # more says how much of a pixel is block where it mixes with the background or the target.
        shows_block = np.clip((colour[..., 2] - colour[..., 0]) / 34.0, 0.0, 1.0)
        rows, cols = np.nonzero(block)
        centroid = np.array([SOURCE[cols].mean(), SOURCE[rows].mean()])
        if self.block is None:
            rows, cols = np.nonzero(window(block, 2) & ~pusher)
            inside = block[rows, cols]
            start, step = coarse_pose(rows, cols, inside, inside), 4.0
        else:  # from where the last image put it, moved as the block's pixels moved
            start, step = self.block + np.array([*(centroid - self.centroid), 0.0]), 1.0
        edge = grow(grow(block)) & ~shrink(shrink(block)) & ~pusher  # the pixels a small move changes
        rows, cols = np.nonzero(edge)
        self.block = Evidence(rows, cols, shows_block[rows, cols], BLOCK_OUTLINE).refine(start, step=step)
        self.centroid = centroid
        # The target never moves: keep what each image shows of it away from the block and pusher
        # (how green a pixel is: how much of it is target where it mixes with the white background),
        # and fit it again whenever a dozen more pixels around it have been seen.
        clear = ~grow(block | pusher)
        green = np.clip(((255 - colour[..., 0]) + (255 - colour[..., 2])) / 222.0, 0.0, 1.0)
        self.target_seen[clear] = green[clear]
        self.target_known |= clear
        shown = self.target_seen > 0.5
        near = window(shown, 2) & self.target_known
        count = int(near.sum())
        if self.target is not None and count < self.target_evidence + 12:
            return
        self.target_evidence = count
        if self.target is None:
            rows, cols = np.nonzero(window(shown, 24))
            inside = shown[rows, cols]
            start = coarse_pose(rows, cols, inside, inside | ~self.target_known[rows, cols])
            start = Evidence(*np.nonzero(near), self.target_seen[near], 0.0).refine(start, step=4.0)
        else:
            start = self.target
        rows, cols = np.nonzero(near)
        self.target = Evidence(rows, cols, self.target_seen[rows, cols], 0.0).refine_around(start, 1.5, 0.5)

    # --- control -------------------------------------------------------------------------------------------------
    def plan(self, pusher: np.ndarray) -> np.ndarray:
        """Where to send the pusher. The block has no friction with the table or the pusher (all of
        gym-pusht's shapes have friction 0) and the space's damping of 0 stops it after every physics
        step, so a push at a point of its outline moves it along that point's inward normal and turns
        it by the normal's moment about its centre of gravity. Take the contact whose (move, turn)
        points most nearly toward the target's pose, keep it while it scores at least 70% of the best,
        line up behind it and push by as much as that projection asks (1 to 20 pixels a step)."""
        block, target = self.block, self.target
        assert block is not None and target is not None
        centre = to_world(block, CENTRE_OF_GRAVITY)
        error = to_world(target, CENTRE_OF_GRAVITY) - centre
        wanted = np.array([error[0], error[1], wrap(target[2] - block[2]) * GYRATION])
        normals = rotate(block[2], CONTACT_NORMALS)
        points = to_world(block, CONTACT_POINTS)
        arm = points - centre
        turn = (arm[:, 0] * normals[:, 1] - arm[:, 1] * normals[:, 0]) / GYRATION
        twist = np.column_stack([normals, turn])
        size = np.linalg.norm(twist, axis=1)
        score = twist @ wanted / size
        stand = points - normals * PUSHER_RADIUS
        approach = stand - normals * APPROACH[-1]
        ends = np.stack([stand, approach], axis=1)
        off_table = ((ends < LOW_TARGET) | (ends > HIGH_TARGET)).any(axis=(1, 2))
        score[off_table] = -np.inf
        best = int(np.argmax(score))
        if self.contact is None or score[self.contact] < 0.7 * score[best]:
            self.contact = best
        k = self.contact
        normal, stand_at = normals[k], stand[k]
        offset = pusher - stand_at
        along = float(offset @ normal)
        across = abs(float(offset[0] * normal[1] - offset[1] * normal[0]))
        if across < 4.0 and -95.0 < along < 3.0:
            push = float(twist[k] @ wanted) / size[k] ** 2
            goal = stand_at + normal * (max(along, 0.0) + float(np.clip(push, 1.0, 20.0)))
        else:
            goal = self.travel(pusher, stand_at, normal, centre)
        return np.clip(goal, LOW_TARGET, HIGH_TARGET).astype(np.float32)

    def travel(self, pusher: np.ndarray, stand_at: np.ndarray, normal: np.ndarray, centre: np.ndarray) -> np.ndarray:
        """The next point on the way to ``stand_at``'s approach line: straight there when the block is
        not in the way, else round the block on a circle about its centre (the shorter way where the
        table allows it)."""
        entry = next(
            (point for point in (stand_at - normal * d for d in APPROACH) if on_table(point)), stand_at - normal * 12
        )
        if self.clear(pusher, entry):
            return entry
        offset = pusher - centre
        # Where the approach line crosses the circle: go round to there.
        start = stand_at - centre
        along = float(start @ normal)
        reach = along + np.sqrt(max(along * along - (start @ start - AROUND**2), 0.0))
        crossing = start - normal * reach
        here, there = np.arctan2(offset[1], offset[0]), np.arctan2(crossing[1], crossing[0])
        turn = wrap(there - here)
        if abs(turn) < np.deg2rad(8):
            return np.clip(centre + crossing, LOW_TARGET, HIGH_TARGET)
        distance = float(np.linalg.norm(offset))
        outward = np.clip(centre + offset / max(distance, 1e-6) * AROUND, LOW_TARGET, HIGH_TARGET)
        if distance < AROUND - 5 and self.clear(pusher, outward):
            return outward
        for direction in (np.sign(turn), -np.sign(turn)):
            for step in (40, 20):
                angle = here + direction * np.deg2rad(step)
                point = np.clip(centre + AROUND * np.array([np.cos(angle), np.sin(angle)]), LOW_TARGET, HIGH_TARGET)
                if self.clear(pusher, point):
                    return point
        return outward

    def clear(self, start: np.ndarray, end: np.ndarray) -> bool:
        """Whether the pusher can go straight from ``start`` to ``end`` without touching the block."""
        assert self.block is not None
        path = start + np.linspace(0.0, 1.0, 40)[:, None] * (end - start)
        return bool(t_distance(path[:, 0], path[:, 1], self.block).min() > PUSHER_RADIUS + 2)


def make_env() -> Any:
    """The env as LeRobot's ``PushtEnv`` config has ``gym.make`` build it (``envs/configs.py``):
    gymnasium's env checker off, a 384-pixel visualization (only ``render()`` uses it; observations
    stay 96x96)."""
    import gym_pusht  # noqa: F401  (registers the env id)
    import gymnasium as gym

    return gym.make(
        "gym_pusht/PushT-v0",
        disable_env_checker=True,
        obs_type="pixels_agent_pos",
        render_mode="rgb_array",
        visualization_width=384,
        visualization_height=384,
        max_episode_steps=MAX_STEPS,
    )


def reference_episodes(seeds: list[int], instruction: str = "") -> list[dict[str, Any]]:
    """One episode per seed, in order, in one env, as LeRobot's rollout runs a batch of one: reset
    with the seed, the policy's action straight into ``step`` (no clipping, no rescaling) until the
    env says terminated or truncated; success if ``is_success`` was true at any step, ``max_reward``
    the largest step reward. Each result carries the digest of what the policy saw and did."""
    from types import SimpleNamespace

    env = make_env()
    policy = Pusher()
    results = []
    try:
        for index, seed in enumerate(seeds):
            obs, _ = env.reset(seed=seed, options={"lerobot_new_rollout": True})  # gym-pusht ignores it
            policy.reset(SimpleNamespace(task="PushT-v0", seed=seed, instruction=instruction, episode_index=index))
            rewards: list[float] = []
            success = False
            while True:
                view = {key: obs[key] for key in POLICY_KEYS} | {"instruction": instruction}
                action = policy.act(view)  # the policy's digest takes in the view and the action
                obs, reward, terminated, truncated, info = env.step(action)
                rewards.append(float(reward))
                success = success or bool(info["is_success"])
                if terminated or truncated or len(rewards) == MAX_STEPS:
                    break
            total = 0.0
            for reward in rewards:
                total += reward
            policy.digest.outcome(success, total, len(rewards))
            results.append({"seed": seed, **policy.digest.result(), "max_reward": max(rewards)})
    finally:
        env.close()
    return results
