"""Program compilers: a validated diagnosis -> a generation program and a training program (paper §3.2).

A `ProgramCompiler` reads a diagnosis ``{"family", "variant", "phase", "factor", "cause", ...}`` and the failing
scene, and writes the two programs of `coda.memory.programs`. Three backends:

* ``template`` (default): deterministic, no tokens. The generation program *recreates the difficulty* as a
  region of factor values: one operation on the diagnosed factor covering the failing scenes (the hull of
  their values padded by ``WINDOW`` of the generator range, their training categories, template ids or
  distractor counts), preceded by the task variant they had (the task component, for families with more
  than one). `region` recompiles a mode's program over all its diagnoses' failing scenes as the mode gains
  diagnoses. The training program is Text2potential's fragment plus learning tools chosen by the failing
  phase.
* ``hf``: a local transformers causal LM (greedy decoding), prompted with the diagnosis, the family's DSL,
  the predicate library and a worked example; its reply must parse into the same DSL and pass validation.
* ``openai``: any OpenAI-compatible ``/chat/completions`` endpoint (e.g. a local vLLM or Ollama), same prompt.

LLM output is data: the first JSON object of the reply is extracted by brace matching and validated; an
invalid reply yields ``None`` programs and an error string (counted, never raised), as do network errors.

Example:
    >>> compiler = make_compiler("template")
    >>> result = compiler.compile({"family": "pick_place", "variant": "bin", "phase": "lift",
    ...                            "factor": "mass", "cause": "the object slips out when lifted"}, scene)
    >>> result.generation["operations"]   # the failing variant, a window around the failing scene's mass
    [{'op': 'set', 'role': None, 'attribute': 'variant', 'value': 'bin'},
     {'op': 'sample', 'role': 'target', 'attribute': 'mass', 'range': [0.0544, 0.2104]}]
    >>> result.training["tools"]["planner_demos"], result.prompt_tokens, result.errors
    (4, 0, [])
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from coda.errors import ProgramError
from coda.learn.predicates import library_spec
from coda.learn.text2potential import Text2Potential
from coda.memory.factors import FACTORS, PHASE_FACTORS, factor_target
from coda.memory.programs import (
    UNSUPPORTED,
    dsl_spec,
    generator_limits,
    generator_variants,
    validate_generation,
    validate_training,
)
from coda.sim.families import REGISTRY
from coda.sim.families.ranges import RANGES, TRAIN_TEMPLATES
from coda.sim.scene import SceneSpec

WINDOW = 0.1  # template programs sample the failing values' hull padded by ±10% of the generator range
# learning tools by failing phase: early (contact-rich) phases lean on demonstrations and imitation,
# later phases on the shaped critic
EARLY_PHASES = ("reach", "grasp", "lift", "contact")
EARLY_TOOLS = {"planner_demos": 4, "imitation_weight": 1.5, "critic_weight": 1.0, "replay_share": 0.25}
LATE_TOOLS = {"planner_demos": 2, "imitation_weight": 1.0, "critic_weight": 1.5, "replay_share": 0.25}
MAX_REPLY_CHARS = 200_000
SYSTEM_PROMPT = (
    "You write programs for a robot-learning data engine. Programs are JSON data in a fixed schema. "
    'Reply with exactly one JSON object {"generation": {...}, "training": {...}} and nothing else.'
)


@dataclass
class CompileResult:
    generation: dict | None  # validated generation program or None
    training: dict | None  # validated training program or None
    prompt_tokens: int
    completion_tokens: int
    errors: list[str] = field(default_factory=list)  # why outputs were rejected; each names the field
    completion: str = ""  # the raw LLM reply (empty for the template backend)


class ProgramCompiler(Protocol):
    name: str

    def compile(
        self, diagnosis: dict, scene: SceneSpec, *, potential_variant: str = "full"
    ) -> CompileResult: ...


# ==================================================================================================
# shared helpers
# ==================================================================================================
def _error(e: Exception, prefix: str = "") -> str:
    return f"{prefix}{e}" if isinstance(e, ProgramError) else f"{prefix}{type(e).__name__}: {e}"


def check_diagnosis(diagnosis: Any, scene: SceneSpec) -> dict[str, Any]:
    """A copy of the diagnosis with the scene's variant filled in; `ProgramError` if it does not fit."""
    if not isinstance(diagnosis, Mapping):
        raise ProgramError("diagnosis", f"expected an object, got {type(diagnosis).__name__}")
    family = diagnosis.get("family")
    if family != scene.family:
        raise ProgramError("diagnosis.family", f"{family!r} diagnosis for a {scene.family!r} scene")
    factor = diagnosis.get("factor") or ""
    if factor and factor not in FACTORS[family]:
        raise ProgramError(
            "diagnosis.factor", f"{family} has factors {sorted(FACTORS[family])}, got {factor!r}"
        )
    if diagnosis.get("variant") not in (None, "", scene.task.variant):
        raise ProgramError(
            "diagnosis.variant", f"{diagnosis['variant']!r} diagnosis for a {scene.task.variant!r} scene"
        )
    phases = [p.name for p in REGISTRY[family].phases(scene.task.variant)]
    if diagnosis.get("phase") not in phases:
        raise ProgramError("diagnosis.phase", f"{family}/{scene.task.variant} has phases {phases}")
    return {**diagnosis, "variant": diagnosis.get("variant") or scene.task.variant, "factor": factor}


def factor_values(scene: SceneSpec) -> dict[str, Any]:
    """The failing scene's value of every factor of its family (what a program can recreate)."""
    out: dict[str, Any] = {}
    for factor, (role, attribute) in FACTORS[scene.family].items():
        i = scene.task.bindings.get(role) if role else None
        if attribute == "position":
            out[factor] = [scene.spatial.poses[i].x, scene.spatial.poses[i].y]
        elif attribute == "yaw":
            out[factor] = scene.spatial.poses[i].yaw
        elif attribute in ("scale", "mass", "friction"):
            out[factor] = getattr(scene.objects[i], attribute)
        elif attribute == "instance":
            out[factor] = {"asset_id": scene.objects[i].asset_id, "category": scene.objects[i].category}
        elif attribute == "distractors":
            out[factor] = len(scene.objects) - len(scene.task.bindings)
        elif attribute == "instruction":
            out[factor] = scene.task.template_id
        elif attribute == "goal_offset":
            t, g = scene.spatial.poses[scene.role("target")], scene.spatial.poses[i]
            out[factor] = [round(g.x - t.x, 4), round(g.y - t.y, 4)]
        elif attribute == "part":
            out[factor] = int(scene.task.goal[0])
    return out


def _nearest_interval(value: float, intervals: list) -> tuple[float, float]:
    return min(
        intervals, key=lambda r: 0.0 if r[0] <= value <= r[1] else min(abs(value - r[0]), abs(value - r[1]))
    )


def _hull(values: Sequence[float], ranges: Any) -> list[float]:
    """[lo, hi]: the hull of `values` padded by ±WINDOW of the generator range, inside the generator interval
    nearest the first value (of a union such as pick_place's two container sides, one side: a range is one
    interval, so values nearest another interval are left out)."""
    intervals = ranges if isinstance(ranges, list) else [ranges]
    lo, hi = _nearest_interval(values[0], intervals)
    kept = [v for v in values if _nearest_interval(v, intervals) == (lo, hi)]
    w = WINDOW * (hi - lo)
    return [round(min(max(min(kept) - w, lo), hi), 4), round(min(max(max(kept) + w, lo), hi), 4)]


def choose_factor(diagnosis: Mapping[str, Any]) -> str:
    """The diagnosed factor, or (phase-only diagnosers, unsupported factors) the phase's most plausible one."""
    family, factor = diagnosis["family"], diagnosis.get("factor") or ""
    if factor and factor_target(family, factor)[1] not in UNSUPPORTED:
        return factor
    prior = PHASE_FACTORS[family].get(diagnosis["phase"], ()) + tuple(FACTORS[family])
    return next(f for f in prior if factor_target(family, f)[1] not in UNSUPPORTED)


def _one_or_many(op: dict[str, Any], key: str, values: list) -> dict[str, Any]:
    """``set`` the one value, or ``sample`` among several (under `key`)."""
    return (
        {**op, "op": "set", "value": values[0]} if len(values) == 1 else {**op, "op": "sample", key: values}
    )


def recreate(factor: str, scenes: Sequence[SceneSpec]) -> dict[str, Any]:
    """One operation that brings a base scene's `factor` into the region the failing `scenes` span: the hull
    of their values padded by ``WINDOW`` (numeric factors), their training categories, training templates or
    distractor counts (a held-out category or template among them leaves the sample unrestricted)."""
    family = scenes[0].family
    role, attribute = factor_target(family, factor)
    values = [factor_values(s)[factor] for s in scenes]
    op: dict[str, Any] = {"role": role, "attribute": attribute}
    if attribute in ("position", "goal_offset"):
        limits = generator_limits(family, role, attribute)
        return {
            **op,
            "op": "sample",
            "range": [_hull([v[k] for v in values], lim) for k, lim in enumerate(limits)],
        }
    if attribute in ("yaw", "scale", "mass", "friction"):
        (limits,) = generator_limits(family, role, attribute)
        return {**op, "op": "sample", "range": _hull(values, limits)}
    if attribute == "instance":
        heldout = RANGES[family]["heldout_categories"]
        categories = sorted({v["category"] for v in values})
        if any(c in heldout for c in categories):
            return {**op, "op": "sample"}
        return {**op, "op": "sample", "categories": categories}
    if attribute == "instruction":
        if any(v >= TRAIN_TEMPLATES for v in values):
            return {**op, "op": "sample"}
        return _one_or_many(op, "values", sorted(set(values)))
    lo, hi = REGISTRY[family].space("generator")["distractors"]
    counts = sorted({int(min(max(v, lo), hi)) for v in values})
    return (
        {**op, "op": "set", "value": counts[0]}
        if len(counts) == 1
        else {**op, "op": "sample", "range": [counts[0], counts[-1]]}
    )


def recreate_variant(scenes: Sequence[SceneSpec]) -> dict[str, Any] | None:
    """The task component of the failing `scenes`: their variant(s), or None for a family with one."""
    if len(generator_variants(scenes[0].family)) < 2:
        return None
    return _one_or_many(
        {"role": None, "attribute": "variant"}, "values", sorted({s.task.variant for s in scenes})
    )


def _constraints(op: Mapping[str, Any], scenes: Sequence[SceneSpec]) -> list[dict[str, Any]]:
    """Keep the family's task objects apart (`Family.separation`) when a template program moves one of them,
    unless a failing scene itself has them closer."""
    separation = REGISTRY[scenes[0].family].separation
    if op["attribute"] != "position" or separation is None:
        return []
    (a, b), dist = separation
    for scene in scenes:
        pa, pb = scene.spatial.poses[scene.role(a)], scene.spatial.poses[scene.role(b)]
        if ((pa.x - pb.x) ** 2 + (pa.y - pb.y) ** 2) ** 0.5 < dist:
            return []  # a failing scene itself has them closer: recreating it must not forbid that
    return [{"relation": "min_distance", "roles": [a, b], "value": dist}]


def generation_program(factor: str, scenes: Sequence[SceneSpec], header: Mapping[str, Any]) -> dict[str, Any]:
    """The template generation program of the region the failing `scenes` span on `factor`: their task
    variant first (changing it may redraw what the factor's operation then sets), then the factor."""
    op = recreate(factor, scenes)
    task = recreate_variant(scenes)
    return validate_generation(
        {
            **header,
            "kind": "generation",
            "perturbs": factor,
            "operations": [op] if task is None else [task, op],
            "constraints": _constraints(op, scenes),
        }
    )


def region(program: Mapping[str, Any], scenes: Sequence[SceneSpec]) -> dict[str, Any]:
    """A mode's generation program recompiled over the failing scenes of all its diagnoses (first = the
    mode's first diagnosis): the region they span on the program's factor. Only template programs are
    regions; another backend's program (an LLM's reply to the mode's first diagnosis) is returned as is,
    since recompiling it would cost a prompt per diagnosis."""
    program = validate_generation(program)
    if program["source"] != "template":
        return program
    header = {"family": program["family"], "mode": program["mode"], "source": "template"}
    return generation_program(program["perturbs"], scenes, header)


def _potential(diagnosis: Mapping[str, Any], scene: SceneSpec, variant: str) -> dict[str, Any]:
    return Text2Potential(variant).compile(
        diagnosis,
        scene,
        family=scene.family,
        task_variant=scene.task.variant,
        instruction=scene.task.instruction,
    )


# ==================================================================================================
# template backend
# ==================================================================================================
class TemplateCompiler:
    """Deterministic compiler: recreate the failing factor's value; Text2potential for the training program."""

    name = "template"

    def programs(self, diagnosis: Mapping[str, Any], scene: SceneSpec, potential_variant: str = "full"):
        """(generation, training) programs; raises `ProgramError` for a diagnosis that does not fit."""
        diag = check_diagnosis(diagnosis, scene)
        header = {"family": scene.family, "mode": str(diag.get("mode") or ""), "source": "template"}
        generation = generation_program(choose_factor(diag), [scene], header)
        tools = EARLY_TOOLS if diag["phase"] in EARLY_PHASES else LATE_TOOLS
        training = validate_training(
            {
                **header,
                "kind": "training",
                "potential": _potential(diag, scene, potential_variant),
                "tools": tools,
            }
        )
        return generation, training

    def compile(self, diagnosis: dict, scene: SceneSpec, *, potential_variant: str = "full") -> CompileResult:
        try:
            generation, training = self.programs(diagnosis, scene, potential_variant)
        except ProgramError as e:
            return CompileResult(None, None, 0, 0, [_error(e, "template: ")])
        return CompileResult(generation, training, 0, 0, [])


# ==================================================================================================
# LLM backends
# ==================================================================================================
class CompletionError(RuntimeError):
    """The LLM backend produced no reply (network, HTTP or response-format error)."""


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int


def extract_json(text: str) -> dict | None:
    """The first JSON object in `text` (brace matching that respects strings), or None. Never evaluates."""
    text = text[:MAX_REPLY_CHARS]
    start = text.find("{")
    while start != -1:
        depth, in_string, escaped = 0, False, False
        for end in range(start, len(text)):
            ch = text[end]
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        value = json.loads(text[start : end + 1])
                    except ValueError:
                        break
                    if isinstance(value, dict):
                        return value
                    break
        start = text.find("{", start + 1)
    return None


def worked_example(scene: SceneSpec) -> dict[str, Any]:
    """A valid reply for an example diagnosis of the scene's family (the template compiler's programs)."""
    phase = REGISTRY[scene.family].phases(scene.task.variant)[1].name
    diagnosis = {"family": scene.family, "variant": scene.task.variant, "phase": phase, "factor": ""}
    diagnosis["cause"] = "example"
    generation, training = TemplateCompiler().programs(diagnosis, scene)
    strip = ("id", "version", "parent", "source", "mode")
    return {
        "diagnosis": diagnosis,
        "reply": {
            "generation": {k: v for k, v in generation.items() if k not in strip},
            "training": {k: v for k, v in training.items() if k not in strip},
        },
    }


def build_prompt(diagnosis: Mapping[str, Any], scene: SceneSpec) -> str:
    """Reference material first, the task last (a prompt too long for a model is cut from the front)."""
    family, variant = scene.family, scene.task.variant
    dump = lambda obj: json.dumps(obj, sort_keys=True, default=list)
    sections = [
        SYSTEM_PROMPT,
        f"## Generation-program DSL for {family}\n{dump(dsl_spec(family))}",
        f"## Text2potential predicate library for {family}/{variant} (training.potential.subgoals)\n"
        f"{dump(library_spec(family, variant))}",
        f"## Worked example\n{dump(worked_example(scene))}",
        f"## Failing scene: factor values\n{dump(factor_values(scene))}",
        f"## Diagnosis\n{dump(dict(diagnosis))}",
        "## Task\nWrite a generation program that recreates the diagnosed difficulty (perturbs = the factor it "
        "changes) and a training program (potential: Text2potential subgoals in order, then tools) that helps "
        "the policy overcome it. Reply with the JSON object only.",
    ]
    return "\n\n".join(sections)


class _LLMCompiler:
    """Shared by the LLM backends: prompt, complete, extract, validate."""

    name = "llm"

    def complete(self, prompt: str) -> Completion:
        raise NotImplementedError

    def compile(self, diagnosis: dict, scene: SceneSpec, *, potential_variant: str = "full") -> CompileResult:
        try:
            diag = check_diagnosis(diagnosis, scene)
            prompt = build_prompt(diag, scene)
        except ProgramError as e:
            return CompileResult(None, None, 0, 0, [_error(e, f"{self.name}: ")])
        try:
            reply = self.complete(prompt)
        except CompletionError as e:
            return CompileResult(None, None, 0, 0, [f"{self.name}: {e}"])
        result = CompileResult(None, None, reply.prompt_tokens, reply.completion_tokens, [], reply.text)
        doc = extract_json(reply.text)
        if doc is None:
            result.errors.append(f"{self.name}: reply: no JSON object found")
            return result
        header = {"family": scene.family, "mode": str(diag.get("mode") or ""), "source": self.name}
        try:
            result.generation = self._generation(doc.get("generation"), header)
        except ProgramError as e:
            result.errors.append(_error(e, f"{self.name}: generation."))
        try:
            result.training = self._training(doc.get("training"), header, diag, scene, potential_variant)
        except ProgramError as e:
            result.errors.append(_error(e, f"{self.name}: training."))
        return result

    @staticmethod
    def _generation(doc: Any, header: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(doc, Mapping):
            raise ProgramError("program", "missing or not an object")
        if doc.get("family", header["family"]) != header["family"]:
            raise ProgramError("family", f"expected {header['family']!r}, got {doc.get('family')!r}")
        return validate_generation({"kind": "generation", **doc, **header})

    @staticmethod
    def _training(doc: Any, header: dict, diagnosis: dict, scene: SceneSpec, variant: str) -> dict[str, Any]:
        if not isinstance(doc, Mapping):
            raise ProgramError("program", "missing or not an object")
        if variant in ("sparse", "task_description"):  # these ablations do not use the diagnosis
            potential = _potential(diagnosis, scene, variant)
        else:
            potential = doc.get("potential")
            if not isinstance(potential, Mapping):
                raise ProgramError("potential", "missing or not an object")
            potential = {"family": scene.family, "variant": scene.task.variant, "source": "llm", **potential}
            if potential["variant"] != scene.task.variant:
                raise ProgramError("potential.variant", f"expected {scene.task.variant!r} (the scene's)")
            if variant == "no_refinement":
                refinement = potential.get("refinement")
                potential["refinement"] = {
                    **(refinement if isinstance(refinement, Mapping) else {}),
                    "enabled": False,
                }
        return validate_training({"kind": "training", **doc, **header, "potential": potential})


class HFCompiler(_LLMCompiler):
    """A local transformers causal LM (greedy decoding). Loads from a local path or the local Hub cache."""

    name = "hf"

    def __init__(
        self, model_path_or_id: str, max_new_tokens: int = 768, max_prompt_tokens: int | None = None
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kwargs = {"local_files_only": True, "trust_remote_code": False}
        self.tokenizer = AutoTokenizer.from_pretrained(model_path_or_id, **kwargs)
        self.model = AutoModelForCausalLM.from_pretrained(model_path_or_id, **kwargs).eval()
        self.max_new_tokens = max_new_tokens
        positions = getattr(self.model.config, "max_position_embeddings", None)
        self.max_prompt_tokens = max_prompt_tokens or (positions - max_new_tokens if positions else None)

    def _encode(self, prompt: str) -> list[int]:
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
            prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = self.tokenizer(prompt)["input_ids"]
        if self.max_prompt_tokens is not None and len(ids) > self.max_prompt_tokens:
            ids = ids[-self.max_prompt_tokens :]  # keep the end: the diagnosis and the task
        return ids

    def _generate(self, input_ids: list[int]) -> list[int]:
        """Greedy decoding: the new token ids."""
        import torch

        ids = torch.tensor([input_ids])
        pad = self.tokenizer.pad_token_id
        pad = self.tokenizer.eos_token_id if pad is None else pad
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=self.max_new_tokens,
                do_sample=False,
                pad_token_id=0 if pad is None else pad,
            )
        return out[0, ids.shape[1] :].tolist()

    def complete(self, prompt: str) -> Completion:
        ids = self._encode(prompt)
        new = self._generate(ids)
        return Completion(self.tokenizer.decode(new, skip_special_tokens=True), len(ids), len(new))


class OpenAICompiler(_LLMCompiler):
    """Any OpenAI-compatible endpoint: POST ``{base_url}/chat/completions`` (stdlib urllib, no SDK)."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 60,
        max_tokens: int = 1024,
    ):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key_env, self.timeout_s, self.max_tokens = (
            model,
            api_key_env,
            timeout_s,
            max_tokens,
        )

    def complete(self, prompt: str) -> Completion:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": self.max_tokens,
        }
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                payload = json.loads(response.read(MAX_REPLY_CHARS * 4).decode("utf-8", errors="replace"))
        except urllib.error.HTTPError as e:
            raise CompletionError(
                f"HTTP {e.code} from {self.url}: {e.read(300).decode(errors='replace')}"
            ) from None
        except (urllib.error.URLError, OSError) as e:  # refused, unreachable, timed out
            raise CompletionError(f"request to {self.url} failed: {e}") from None
        except ValueError as e:
            raise CompletionError(f"response is not JSON: {e}") from None
        try:
            text = payload["choices"][0]["message"]["content"]
            usage = payload.get("usage") or {}
            tokens = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            raise CompletionError(f"unexpected response format ({type(e).__name__}: {e})") from None
        if not isinstance(text, str):
            raise CompletionError("unexpected response format: message content is not text")
        return Completion(text, *tokens)


COMPILERS = {"template": TemplateCompiler, "hf": HFCompiler, "openai": OpenAICompiler}


def make_compiler(kind: str, **kwargs: Any) -> ProgramCompiler:
    """A compiler backend by name: "template" | "hf" (model_path_or_id=...) | "openai" (base_url=, model=)."""
    if kind not in COMPILERS:
        raise ValueError(f"unknown compiler {kind!r}; expected one of {sorted(COMPILERS)}")
    return COMPILERS[kind](**kwargs)
