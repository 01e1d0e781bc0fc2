"""Failure diagnosis: the sim critic on real rollouts, novelty, noisy/phase-only wrappers, the VLM critic."""

import json

import numpy as np
import pytest

from coda import data
from coda.engine.diagnose import (
    Diagnosis,
    NoisyDiagnoser,
    PhaseOnlyDiagnoser,
    SimDiagnoser,
    TrainingReference,
    VLMDiagnoser,
    collect_evidence,
    extract_json_object,
    factor_values,
    keyframe_steps,
    make_diagnoser,
    render_keyframes,
)
from coda.errors import ProgramError
from coda.memory.factors import FACTORS, PHASE_FACTORS
from coda.sim.families import REGISTRY
from coda.sim.rollout import RolloutRecord, plan_episode, run_episode


class Idle:
    """Holds still with the gripper open."""

    def act(self, obs):
        return np.tile([0, 0, 0, 0, 0, 0, 1.0], (8, 1))


class Dropper:
    """The family's scripted planner, except that it opens the gripper three steps into the first chunk that
    starts with the object held (i.e. while lifting) and never closes it again."""

    def __init__(self, ctx):
        self.planner = REGISTRY[ctx.family].planner(ctx)
        self.obj = ctx.bindings["target"] if "target" in ctx.bindings else ctx.bindings["top"]
        self.fired = False

    def act(self, obs):
        chunk = self.planner.act(obs)
        if self.fired:
            chunk[:, 6] = 1.0
        elif obs.state["finger_contact"][self.obj].all():
            chunk[3:, 6] = 1.0
            self.fired = True
        return chunk


def drop_episode(world, scene):
    world.load(scene)
    return run_episode(world, scene, Dropper(world.ctx), max_chunks=4, reload=False)


@pytest.fixture(scope="module")
def pick(small_data):
    scenes = data.seed_scenes(small_data, "pick_place")
    return scenes[0], TrainingReference.from_scenes(scenes)


@pytest.fixture(scope="module")
def records(pick, world, small_data):
    scene, _ = pick
    push = data.seed_scenes(small_data, "push", 1)[0]
    heavy = scene.replace_object(scene.task.bindings["target"], mass=1.5)
    return {
        "idle": (run_episode(world, scene, Idle(), max_chunks=3), scene),
        "idle_push": (run_episode(world, push, Idle(), max_chunks=3), push),
        "drop": (drop_episode(world, scene), scene),
        "heavy_drop": (drop_episode(world, heavy), heavy),
        "success": (plan_episode(world, scene), scene),
    }


def test_idle_policy_is_diagnosed_at_reach(records, small_data):
    sim = SimDiagnoser()
    for key in ("idle", "idle_push"):
        rec, scene = records[key]
        ref = TrainingReference.from_scenes(data.seed_scenes(small_data, scene.family))
        d = sim.diagnose(rec, scene, None, ref)
        assert not rec.success and d.phase == "reach" and d.family == scene.family
        assert d.factor in PHASE_FACTORS[scene.family]["reach"]
        assert "reach" in d.cause and d.factor in d.cause and "cm" in d.cause  # grounded in numbers
        assert all(0 <= s <= rec.steps for s in d.evidence_steps) and rec.steps in d.evidence_steps
        assert 0.0 <= d.confidence <= 1.0


def test_drop_during_lift_is_attributed_to_a_grip_factor(records, pick):
    rec, scene = records["drop"]
    d = SimDiagnoser().diagnose(rec, scene, None, pick[1])
    assert not rec.success and rec.phases[-1][2], "lift was reached before the drop"
    assert d.phase in ("lift", "transport")
    assert d.factor in ("mass", "friction", "scale", "instance")
    # the evidence names the step the object left the fingers, and that step is in evidence_steps
    held = rec.states["finger_contact"][:, scene.task.bindings["target"]].all(axis=1)
    held[1:] &= rec.actions[:, 6] <= 0  # held = fingers on it while commanded closed
    lost = int(np.flatnonzero(held[:-1] & ~held[1:])[-1]) + 1
    assert f"at step {lost}" in d.cause and lost in d.evidence_steps and "released" in d.cause


def test_success_is_not_diagnosed(records, pick):
    rec, scene = records["success"]
    assert rec.success
    for kind in ("sim", "noisy:1", "phase_only"):
        assert make_diagnoser(kind).diagnose(rec, scene, None, pick[1]) is None


def test_sim_diagnosis_is_deterministic_and_grounded_in_the_record(records, pick, world):
    rec, scene = records["drop"]
    sim = SimDiagnoser()
    d = sim.diagnose(rec, scene, None, pick[1])
    again = RolloutRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert sim.diagnose(again, scene, None, pick[1]) == d
    assert SimDiagnoser().diagnose(drop_episode(world, scene), scene, None, pick[1]) == d  # fresh rollout
    # a construction trace that rescaled the target adds (weak) evidence for scale
    trace = [{"op": "check", "name": "scale", "ok": False}, {"op": "repair", "name": "rescale", "object": 0}]
    with_trace = {e.kind: e.support for e in collect_evidence(rec, scene, trace)}
    assert with_trace["trace"] == {"scale": 0.3}
    assert "trace" not in {e.kind for e in collect_evidence(rec, scene)}
    with pytest.raises(ValueError, match="diagnosed against"):
        sim.diagnose(rec, records["idle_push"][1], None, pick[1])


def test_novelty_against_the_training_reference(pick, catalog):
    scene, ref = pick
    assert set(ref.novelty(scene).values()) == {0.0}  # a trained scene is not novel at all
    t = scene.task.bindings["target"]
    heavy = ref.novelty(scene.replace_object(t, mass=1.5))
    assert heavy["mass"] > 0.95 and all(v == 0.0 for f, v in heavy.items() if f != "mass")
    assert 0.0 < ref.novelty(scene.replace_object(t, mass=0.3))["mass"] < heavy["mass"]  # graded
    trained = set(ref.to_dict()["families"]["pick_place"]["categorical"]["instance"])
    unseen = next(
        a for a in catalog.rigid if a.category == scene.objects[t].category and a.asset_id not in trained
    )
    assert ref.novelty(scene.replace_object(t, asset_id=unseen.asset_id))["instance"] == 0.5
    assert ref.novelty(scene.replace_object(t, asset_id="x/y", category="blob_elongated"))["instance"] == 1.0
    assert ref.novelty(scene.replace_pose(t, x=scene.spatial.poses[t].x + 0.3))["target_position"] > 0.5
    values = factor_values(scene)
    assert set(values) == set(FACTORS["pick_place"]) and values["mass"] == scene.objects[t].mass
    # JSON round trip keeps every judgement; an empty reference finds everything novel
    back = TrainingReference.from_dict(json.loads(json.dumps(ref.to_dict())))
    assert back.novelty(scene.replace_object(t, mass=0.3)) == ref.novelty(scene.replace_object(t, mass=0.3))
    assert set(TrainingReference().novelty(scene).values()) == {1.0}
    broken = ref.to_dict()
    broken["families"]["pick_place"]["numeric"]["mass"] = [[0.1, 0.2]]
    with pytest.raises(ProgramError, match="^families.pick_place.numeric.mass"):
        TrainingReference.from_dict(broken)


def test_a_drop_is_blamed_on_the_factor_the_scene_is_novel_in(records, pick, world):
    rec, scene = records["heavy_drop"]
    ref = pick[1]
    assert ref.novelty(scene)["mass"] > 0.95
    d = SimDiagnoser().diagnose(rec, scene, None, ref)
    assert d.phase in ("lift", "transport") and d.factor == "mass" and "novelty 1.00" in d.cause
    # the same failure on a scene that is novel in friction instead is blamed on friction
    slippery = pick[0].replace_object(scene.task.bindings["target"], friction=0.06)
    assert ref.novelty(slippery)["friction"] > 0.5 and ref.novelty(slippery)["mass"] == 0.0
    assert SimDiagnoser().diagnose(drop_episode(world, slippery), slippery, None, ref).factor == "friction"


def test_noisy_and_phase_only_wrappers(records, pick):
    ref, sim = pick[1], SimDiagnoser()
    failed = [records[k] for k in ("idle", "idle_push", "drop", "heavy_drop")]
    for rec, scene in failed:
        base = sim.diagnose(rec, scene, None, ref)
        assert NoisyDiagnoser(sim, 0.0).diagnose(rec, scene, None, ref) == base
        noisy = NoisyDiagnoser(sim, 1.0, seed=3)
        d = noisy.diagnose(rec, scene, None, ref)
        assert d.phase != base.phase and d.factor != base.factor and d.confidence < base.confidence
        assert d.phase in rec.phase_names and d.factor in FACTORS[scene.family]
        assert noisy.diagnose(rec, scene, None, ref) == d  # keyed by seed + scene hash
        only = PhaseOnlyDiagnoser(sim).diagnose(rec, scene, None, ref)
        assert only.factor == "" and (only.phase, only.cause) == (base.phase, base.cause)
        Diagnosis.from_dict(only.to_dict())  # a phase-only diagnosis is valid
    assert (
        make_diagnoser("noisy:0.25").name == "noisy:0.25"
        and make_diagnoser("phase_only").name == "phase_only"
    )
    for bad in ("noisy:x", "noisy:2", "gpt"):
        with pytest.raises(ValueError):
            make_diagnoser(bad)
    with pytest.raises(TypeError):
        make_diagnoser("sim", model_path="x")
    assert make_diagnoser("noisy:1", seed=3).diagnose(*failed[0], None, ref) == NoisyDiagnoser(
        sim, 1.0, seed=3
    ).diagnose(*failed[0], None, ref)


def test_diagnosis_validation_names_the_field(records, pick):
    good = SimDiagnoser().diagnose(*records["drop"], None, pick[1]).to_dict()
    assert Diagnosis.from_dict(json.loads(json.dumps(good))).to_dict() == good
    bad = {
        "family": "juggle",
        "variant": "close",
        "phase": "open",
        "factor": "colour",
        "cause": "",
        "confidence": 1.5,
        "evidence_steps": [-1],
    }
    for key, value in bad.items():
        with pytest.raises(ProgramError) as err:
            Diagnosis.from_dict({**good, key: value})
        assert err.value.field == key and str(err.value).startswith(key)
    with pytest.raises(ProgramError, match="^factor: expected a string"):
        Diagnosis.from_dict({**good, "factor": ["mass"]})
    with pytest.raises(ProgramError, match="^extra"):
        Diagnosis.from_dict({**good, "extra": 1})
    with pytest.raises(ProgramError, match="^cause: missing"):
        Diagnosis.from_dict({k: v for k, v in good.items() if k != "cause"})


def test_json_extraction_is_brace_matched_and_never_evaluated():
    assert extract_json_object('noise {"a": "x}{", "b": {"c": 1}} tail {"d": 2}') == {
        "a": "x}{",
        "b": {"c": 1},
    }
    assert extract_json_object('{bad} then {"ok": "a \\" } b"}') == {"ok": 'a " } b'}
    assert extract_json_object("__import__('os') {no json") is None
    assert extract_json_object("[1, 2]") is None


# -- the VLM critic, with a tiny random llava built offline ------------------------------------------
@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    """A tiny llava (CLIP vision tower + llama) with a character-level tokenizer, saved to disk."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "<image>": 4}
    for ch in [chr(i) for i in range(32, 127)] + ["\n"]:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens={"image_token": "<image>"},
    )
    images = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = LlavaProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=16,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # the CLS token, dropped by the "default" strategy
    )
    small = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**small, image_size=32, patch_size=16, projection_dim=16),
        text_config=LlamaConfig(
            **small,
            vocab_size=len(vocab),
            num_key_value_heads=2,
            max_position_embeddings=4096,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
        ),
        image_token_id=4,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_vlm")
    LlavaForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    return path


def test_vlm_keyframes_are_rendered_from_the_record(records, small_data):
    from coda.sim.world import World

    rec, scene = records["drop"]
    steps = keyframe_steps(rec, 3)
    assert steps[0] == 0 and steps[-1] == rec.steps and len(steps) == 3
    w = World(small_data, render=True, image_size=32)
    try:
        frames = render_keyframes(w, scene, rec, steps)
        assert [f.shape for f in frames] == [(32, 64, 3)] * 3
        assert np.abs(frames[0].astype(int) - frames[-1].astype(int)).mean() > 0.5  # the arm moved
        assert np.array_equal(render_keyframes(w, scene, rec, steps)[1], frames[1])  # deterministic
    finally:
        w.close()


def test_vlm_rejects_random_output_and_accepts_valid_json(tiny_vlm, records, pick, small_data):
    import torch

    from coda.sim.world import World

    vlm = make_diagnoser(
        "vlm",
        model_path=str(tiny_vlm),
        world_factory=lambda: World(small_data, render=True, image_size=32),
        max_new_tokens=24,
    )
    assert isinstance(vlm, VLMDiagnoser)
    rec, scene = records["drop"]
    try:
        assert vlm.diagnose(rec, scene, None, pick[1]) is None  # a random model does not write the schema
        assert (vlm.calls, vlm.invalid) == (1, 1) and vlm.prompt_tokens > 500 and vlm.completion_tokens >= 1
        assert (
            vlm.diagnose(*records["success"], None, pick[1]) is None and vlm.calls == 1
        )  # no call on success

        def answer(text):
            ids = torch.tensor([vlm.processor.tokenizer(text, add_special_tokens=False).input_ids])
            return lambda input_ids, **kw: torch.cat([input_ids, ids], dim=1)

        vlm.model.generate = answer('Sure. {"phase": "transport", "factor": "mass", "cause": "it fell"} done')
        d = vlm.diagnose(rec, scene, None, pick[1])
        assert (d.phase, d.factor, d.cause, d.family) == ("transport", "mass", "it fell", "pick_place")
        assert d.evidence_steps == tuple(keyframe_steps(rec, 3)) and (vlm.calls, vlm.invalid) == (2, 1)
        vlm.model.generate = answer('{"phase": "transport", "factor": "colour", "cause": "it fell"}')
        assert vlm.diagnose(rec, scene, None, pick[1]) is None and vlm.invalid == 2  # not a factor
    finally:
        vlm.close()
