"""The VLM critic: a transformers image-text-to-text model shown re-rendered keyframes and the phase log.

`VLMDiagnoser` loads the model and its processor from a local path only (no remote code), re-renders
keyframes of the failed rollout from its recorded states (`keyframe_steps`, `render_keyframes`: no
physics is stepped), prompts with the instruction, the phase log and the family's phases and factors
(`vlm_prompt`), decodes greedily and parses the first JSON object of the answer (never evaluated) into a
validated `Diagnosis`; an answer that does not name a phase and a factor of the family is rejected.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from coda.engine.diagnose.record import MAX_CAUSE_CHARS, Diagnosis, Failure, FailureCritic
from coda.errors import ProgramError
from coda.memory.factors import FACTORS
from coda.sim.rollout import RolloutRecord
from coda.sim.scene import SceneSpec


def extract_json_object(text: str) -> dict | None:
    """The first balanced ``{...}`` in `text` that parses as a JSON object (strings respected), else None;
    the same parser the program compilers use (`coda.engine.compile.extract_json`), never an evaluation."""
    from coda.engine.compile import extract_json

    return extract_json(text)


def phase_log(record: RolloutRecord) -> list[str]:
    """One line per phase: the step it was first completed at, or 'not reached'."""
    lines = []
    for j, name in enumerate(record.phase_names):
        col = record.phases[:, j]
        lines.append(
            f"{name}: completed at step {int(np.argmax(col))}" if col.any() else f"{name}: not reached"
        )
    return lines


def keyframe_steps(record: RolloutRecord, n: int) -> list[int]:
    """n control steps to show: the start, the phase advances, the end (evenly thinned or filled)."""
    T = record.steps
    cands = sorted(
        {0, T}
        | {
            int(np.argmax(record.phases[:, j]))
            for j in range(record.phases.shape[1])
            if record.phases[:, j].any()
        }
    )
    if len(cands) > n:
        return [cands[int(round(i))] for i in np.linspace(0, len(cands) - 1, n)]
    fill = [int(round(x)) for x in np.linspace(0, T, n + 2)[1:-1]]
    for s in fill:
        if len(cands) >= n:
            break
        if s not in cands:
            cands.append(s)
    return sorted(cands)


def render_keyframes(world, scene: SceneSpec, record: RolloutRecord, steps: list[int]) -> list[np.ndarray]:
    """Re-render recorded states (arm and finger joints, object poses, drawer joints); no physics is stepped.

    `world` must render (``World(..., render=True)``); each frame is the two camera views side by side,
    (H, 2W, 3) uint8. Setting poses from the record is exact and deterministic; replaying actions is not.
    """
    import pybullet as p

    from coda.sim.world import ARM_JOINTS, FINGER_JOINTS

    world.load(scene)
    c, s = world.client, record.states
    frames = []
    for t in steps:
        for j, q in zip(ARM_JOINTS, s["q"][t]):
            p.resetJointState(world.robot, j, float(q), physicsClientId=c)
        for j in FINGER_JOINTS:
            p.resetJointState(world.robot, j, float(s["grip"][t][0]) / 2, physicsClientId=c)
        k = 0
        for i, body in enumerate(world.bodies):
            p.resetBasePositionAndOrientation(
                body.uid, s["obj_pos"][t][i].tolist(), s["obj_quat"][t][i].tolist(), physicsClientId=c
            )
            for j in body.movable_joints:
                p.resetJointState(body.uid, j, float(s["art_q"][t][k]), physicsClientId=c)
                k += 1
        views = world.cameras()
        frames.append(np.concatenate(list(views), axis=1))
    return frames


def vlm_prompt(record: RolloutRecord) -> str:
    """Instruction, phase log, the family's phases and factors and the answer schema."""
    family = record.family
    schema = {
        "phase": f"one of {record.phase_names}",
        "factor": f"one of {list(FACTORS[family])}",
        "cause": "one short sentence",
        "confidence": "number in [0, 1]",
    }
    return "\n".join(
        [
            "You are checking a failed robot manipulation rollout of a Franka Panda arm.",
            f"Task family: {family} ({record.variant}). Instruction: {record.instruction!r}.",
            f"The images are keyframes in time order, each two camera views side by side; "
            f"the episode lasted {record.steps} control steps.",
            "Phase log (cumulative subgoals):",
            *phase_log(record),
            f"Phases of the task, in order: {', '.join(record.phase_names)}.",
            f"Generative factors of the scene: {', '.join(FACTORS[family])}.",
            "Say which phase failed, which factor most likely caused it and why.",
            "Answer with one JSON object and nothing else, following this schema:",
            json.dumps(schema),
        ]
    )


class VLMDiagnoser(FailureCritic):
    """A transformers image-text-to-text model, loaded from a local path, as the failure critic.

    Output that is not a JSON object naming a phase and a factor of the family is rejected (returns None)
    and counted in ``invalid``; ``calls``, ``prompt_tokens`` and ``completion_tokens`` count usage.
    """

    name = "vlm"

    def __init__(
        self,
        model_path: str,
        *,
        world_factory: Callable[[], Any] | None = None,
        data_dir: str = "data",
        keyframes: int = 3,
        max_new_tokens: int = 128,
    ) -> None:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.processor = AutoProcessor.from_pretrained(
            model_path, local_files_only=True, trust_remote_code=False
        )
        self.model = AutoModelForImageTextToText.from_pretrained(
            model_path, local_files_only=True, trust_remote_code=False
        ).eval()
        self.world_factory = world_factory or (lambda: _render_world(data_dir))
        self._world = None
        self.keyframes, self.max_new_tokens = int(keyframes), int(max_new_tokens)
        self.invalid = self.calls = self.prompt_tokens = self.completion_tokens = 0

    def _images(self, record: RolloutRecord, scene: SceneSpec) -> tuple[list, list[int]]:
        from PIL import Image

        if self._world is None:
            self._world = self.world_factory()
        steps = keyframe_steps(record, self.keyframes)
        return [Image.fromarray(f) for f in render_keyframes(self._world, scene, record, steps)], steps

    def _inputs(self, prompt: str, images: list) -> dict:
        proc = self.processor
        if getattr(proc, "chat_template", None):
            content = [{"type": "image"} for _ in images] + [{"type": "text", "text": prompt}]
            messages = [{"role": "user", "content": content}]
            text = proc.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:
            text = getattr(proc, "image_token", "<image>") * len(images) + "\n" + prompt
        return proc(text=text, images=images, return_tensors="pt")

    def generate(self, prompt: str, images: list) -> str:
        """Greedy decoding; counts prompt and completion tokens."""
        import torch

        inputs = self._inputs(prompt, images).to(self.model.device)
        n_in = int(inputs["input_ids"].shape[1])
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens, do_sample=False)
        new = out[0, n_in:]
        self.prompt_tokens += n_in
        self.completion_tokens += int(new.shape[0])
        return self.processor.decode(new, skip_special_tokens=True)

    def parse(self, text: str, record: RolloutRecord, default_steps: list[int]) -> Diagnosis | None:
        """Validate a model answer into a Diagnosis of the record's family, or None."""
        obj = extract_json_object(text)
        if obj is None:
            return None
        cause = obj.get("cause")
        d = {
            "family": record.family,
            "variant": record.variant,
            "phase": obj.get("phase"),
            "factor": obj.get("factor"),
            "cause": cause[:MAX_CAUSE_CHARS] if isinstance(cause, str) else cause,
            "confidence": obj.get("confidence", 0.5),
            "evidence_steps": obj.get("evidence_steps", default_steps),
        }
        try:
            diag = Diagnosis.from_dict(d)
        except ProgramError:
            return None
        if diag.factor == "" or any(s > record.steps for s in diag.evidence_steps):
            return None
        return diag

    def judge(self, failure: Failure) -> Diagnosis | None:
        record = failure.record
        images, steps = self._images(record, failure.scene)
        self.calls += 1
        diag = self.parse(self.generate(vlm_prompt(record), images), record, steps)
        if diag is None:
            self.invalid += 1
        return diag

    def close(self) -> None:
        if self._world is not None:
            self._world.close()
            self._world = None


def _render_world(data_dir: str):
    from coda.sim.world import World

    return World(data_dir, render=True)
