"""Program compilers: the template backend recreates the failing factor's value on any base scene; the hf
backend runs a tiny in-test transformers model (invalid output is counted, valid output accepted); the openai
backend talks to a stub OpenAI-compatible server on 127.0.0.1 and never crashes on bad replies."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from coda.engine import compile as C
from coda.engine.interpret import apply_generation
from coda.memory import programs as P
from coda.memory.factors import FACTORS, PHASE_FACTORS, factor_target
from coda.sim.families import REGISTRY
from coda.sim.families.ranges import RANGES, TRAIN_TEMPLATES


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    """The asset catalog: the repository's built data/ when present (0.5 s), else built here (~8 s)."""
    from coda.sim.assets import build_assets, load_catalog

    repo_data = Path(__file__).resolve().parents[1] / "data"
    if (repo_data / "assets" / "catalog.json").exists():
        return load_catalog(repo_data)
    return build_assets(tmp_path_factory.mktemp("assets"))


def sample(catalog, family, split, seed):
    return REGISTRY[family].sample(np.random.default_rng(seed), catalog, split)


def diagnosis(scene, phase, factor, cause="the policy fails here"):
    return {
        "family": scene.family,
        "variant": scene.task.variant,
        "phase": phase,
        "factor": factor,
        "cause": cause,
        "confidence": 0.8,
        "evidence_steps": [12, 20],
    }


# -- template backend -------------------------------------------------------------------------------------------
def _check_recreated(factor, fail, base, out):
    """The perturbed factor of `out` sits in the template's window around the failing value."""
    family = fail.family
    role, attribute = factor_target(family, factor)
    want, got, before = (C.factor_values(s)[factor] for s in (fail, out, base))
    if attribute == "instance":
        if want["category"] not in RANGES[family]["heldout_categories"]:
            assert got["category"] == want["category"]
        return
    if attribute == "instruction":
        assert got == (want if want < TRAIN_TEMPLATES else got) and got < TRAIN_TEMPLATES
        return
    if attribute == "distractors":
        lo, hi = REGISTRY[family].space("generator")["distractors"]
        assert got == min(max(want, lo), hi)
        return
    want, got, before = (np.atleast_1d(np.asarray(v, dtype=float)) for v in (want, got, before))
    for k, lim in enumerate(P.generator_limits(family, role, attribute)):
        intervals = lim if isinstance(lim, list) else [lim]
        width = max(hi - lo for lo, hi in intervals)
        assert abs(got[k] - want[k]) <= C.WINDOW * width + 2e-3, (factor, got, want)
        if abs(before[k] - want[k]) > C.WINDOW * width + 2e-3:
            assert abs(got[k] - want[k]) < abs(before[k] - want[k])  # moved toward the failing value


@pytest.mark.parametrize("family", sorted(REGISTRY))
def test_template_programs_validate_and_recreate_the_failing_value(family, catalog):
    compiler = C.make_compiler("template")
    applied = refused = 0
    for k in range(3):
        fail = sample(catalog, family, "generator", 100 + k)
        base = sample(catalog, family, "seed", 200 + k)
        phases = [p.name for p in REGISTRY[family].phases(fail.task.variant)]
        for phase in phases:
            for factor in [*FACTORS[family], ""]:
                res = compiler.compile(diagnosis(fail, phase, factor), fail)
                assert res.errors == [] and (res.prompt_tokens, res.completion_tokens) == (0, 0)
                gen, train = res.generation, res.training
                assert P.validate_program(gen) == gen and P.validate_program(train) == train
                assert gen["source"] == train["source"] == "template"
                chosen = C.choose_factor(diagnosis(fail, phase, factor))
                assert gen["perturbs"] == chosen
                if factor and factor_target(family, factor)[1] != "part":
                    assert chosen == factor
                else:  # phase-only diagnosis (or an unsupported factor): the phase's most plausible factor
                    assert chosen == next(
                        f
                        for f in PHASE_FACTORS[family].get(phase, FACTORS[family])
                        if factor_target(family, f)[1] != "part"
                    )
                assert train["potential"]["variant"] == fail.task.variant
                assert train["tools"]["planner_demos"] == (4 if phase in C.EARLY_PHASES else 2)
                try:
                    out = apply_generation(gen, base, np.random.default_rng(k), catalog)
                except (
                    P.ProgramError
                ) as e:  # the base has an object where the failing scene had the moved one
                    assert e.field.startswith("constraints"), str(e)
                    refused += 1
                    continue
                applied += 1
                _check_recreated(chosen, fail, base, out)
    assert refused <= 0.1 * (applied + refused)


def test_template_potential_variants_and_bad_diagnoses(catalog):
    fail = sample(catalog, "pick_place", "generator", 1)
    compiler = C.TemplateCompiler()
    diag = diagnosis(fail, "lift", "mass", "the object slips out of the fingers")
    assert (
        compiler.compile(diag, fail, potential_variant="sparse").training["potential"]["potential"] == "zero"
    )
    frag = compiler.compile(diag, fail, potential_variant="no_refinement").training["potential"]
    assert frag["refinement"]["enabled"] is False and frag["subgoals"]
    for bad, field in (
        ({**diag, "family": "stack"}, "diagnosis.family"),
        ({**diag, "factor": "colour"}, "diagnosis.factor"),
        ({**diag, "phase": "fly"}, "diagnosis.phase"),
        ({**diag, "variant": "open"}, "diagnosis.variant"),
        ("lift", "diagnosis"),
    ):
        res = compiler.compile(bad, fail)
        assert res.generation is None and res.training is None
        assert len(res.errors) == 1 and res.errors[0].startswith(f"template: {field}: ")


def test_extract_json_takes_the_first_object_and_never_evaluates():
    text = 'Sure! {"a": "}{", "b": {"c": [1, 2]}} and then {"x": 1}'
    assert C.extract_json(text) == {"a": "}{", "b": {"c": [1, 2]}}
    assert C.extract_json('{"broken": } {"ok": "\\"}"}') == {"ok": '"}'}
    assert C.extract_json("__import__('os').system('echo hi')") is None
    assert C.extract_json('{"a": 1') is None and C.extract_json("[1, 2]") is None


def _valid_reply(catalog, scene, diag) -> str:
    gen, train = C.TemplateCompiler().programs(diag, scene)
    body = json.dumps(
        {"generation": gen, "training": {"potential": train["potential"], "tools": train["tools"]}}
    )
    return f"Here are the programs.\n```json\n{body}\n```\n"


# -- hf backend with a tiny model built here --------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, catalog):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("tiny_llm")
    scene = sample(catalog, "pick_place", "generator", 3)
    corpus = [_valid_reply(catalog, scene, diagnosis(scene, "grasp", "scale")), C.SYSTEM_PROMPT]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>", clean_up_tokenization_spaces=False
    )
    fast.save_pretrained(path)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def test_hf_backend_counts_invalid_output_as_an_error(tiny_model, catalog):
    fail = sample(catalog, "push", "generator", 4)
    compiler = C.make_compiler("hf", model_path_or_id=tiny_model, max_new_tokens=24)
    assert compiler.max_prompt_tokens == 512 - 24  # the prompt is cut to fit the model's positions
    res = compiler.compile(diagnosis(fail, "push", "friction"), fail)
    assert res.generation is None and res.training is None
    assert res.errors and res.errors[0].startswith("hf: ")
    assert res.prompt_tokens == 512 - 24 and 0 < res.completion_tokens <= 24


def test_hf_backend_accepts_a_valid_completion(tiny_model, catalog):
    fail = sample(catalog, "pick_place", "generator", 5)
    diag = diagnosis(fail, "grasp", "target_yaw")
    reply = _valid_reply(catalog, fail, diag)

    class Scripted(C.HFCompiler):
        def _generate(self, input_ids):  # the decoding step returns a well-formed reply
            return self.tokenizer(reply, add_special_tokens=False)["input_ids"]

    compiler = Scripted(tiny_model, max_new_tokens=24)
    res = compiler.compile(diag, fail)
    assert res.errors == [] and res.completion == reply
    assert res.generation["source"] == res.training["source"] == "hf"
    assert res.generation["perturbs"] == "target_yaw" and res.generation["family"] == "pick_place"
    assert res.completion_tokens == len(compiler.tokenizer(reply, add_special_tokens=False)["input_ids"])
    assert res.prompt_tokens > 0
    out = apply_generation(
        res.generation, sample(catalog, "pick_place", "seed", 1), np.random.default_rng(0), catalog
    )
    assert out.family == "pick_place"


# -- openai backend against a stub server -----------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        status, payload, delay = self.server.reply
        time.sleep(delay)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (the timeout case)
            pass

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def stub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.requests, server.reply = [], (200, {}, 0.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _chat(content, prompt_tokens=321, completion_tokens=54):
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }


def test_openai_backend_accepts_valid_and_counts_invalid_replies(stub, catalog, monkeypatch):
    monkeypatch.setenv("CODA_TEST_KEY", "sk-test")
    url = f"http://127.0.0.1:{stub.server_address[1]}/v1"
    compiler = C.make_compiler(
        "openai", base_url=url, model="tiny-writer", api_key_env="CODA_TEST_KEY", timeout_s=5
    )
    fail = sample(catalog, "stack", "generator", 6)
    diag = diagnosis(fail, "align", "base_position")
    stub.reply = (200, _chat(_valid_reply(catalog, fail, diag)), 0.0)
    res = compiler.compile(diag, fail)
    assert res.errors == [] and (res.prompt_tokens, res.completion_tokens) == (321, 54)
    assert res.generation["source"] == "openai" and res.generation["perturbs"] == "base_position"
    assert res.training["family"] == "stack"
    request = stub.requests[-1]
    assert (
        request["path"] == "/v1/chat/completions" and request["headers"]["Authorization"] == "Bearer sk-test"
    )
    assert request["body"]["model"] == "tiny-writer" and request["body"]["temperature"] == 0
    assert '"base_position"' in request["body"]["messages"][-1]["content"]
    # not JSON at all: no programs, the error is counted, tokens still count
    stub.reply = (200, _chat("I think the block is too far away."), 0.0)
    res = compiler.compile(diag, fail)
    assert (res.generation, res.training) == (None, None) and res.prompt_tokens == 321
    assert res.errors == ["openai: reply: no JSON object found"]
    # a generation program outside the DSL is rejected with its field named; the training program survives
    bad = C.extract_json(_valid_reply(catalog, fail, diag))
    bad["generation"]["operations"][0]["attribute"] = "colour"
    stub.reply = (200, _chat(json.dumps(bad)), 0.0)
    res = compiler.compile(diag, fail)
    assert res.generation is None and res.training is not None
    assert res.errors[0].startswith("openai: generation.operations[0].attribute: unknown attribute 'colour'")


@pytest.mark.parametrize(
    "reply,expected",
    [
        ((500, b'{"error": "overloaded"}', 0.0), "openai: HTTP 500"),
        ((200, b"<html>not json</html>", 0.0), "openai: response is not JSON"),
        ((200, {"choices": []}, 0.0), "openai: unexpected response format"),
        ((200, {"choices": [{"message": {"content": None}}]}, 0.0), "openai: unexpected response format"),
        ((200, _chat("{}"), 1.5), "openai: request to"),  # slower than the client's timeout
    ],
)
def test_openai_backend_survives_server_errors(stub, catalog, reply, expected):
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    compiler = C.OpenAICompiler(url, "tiny-writer", api_key_env="CODA_UNSET_KEY", timeout_s=0.5)
    fail = sample(catalog, "drawer", "generator", 7)
    stub.reply = reply
    res = compiler.compile(diagnosis(fail, "reach", "cabinet_yaw"), fail)
    assert (res.generation, res.training) == (None, None)
    assert len(res.errors) == 1 and res.errors[0].startswith(expected), res.errors
    assert "Authorization" not in stub.requests[-1]["headers"]


def test_openai_backend_survives_a_refused_connection(catalog):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    compiler = C.OpenAICompiler(f"http://127.0.0.1:{port}", "m", timeout_s=2)
    fail = sample(catalog, "push", "generator", 8)
    res = compiler.compile(diagnosis(fail, "reach", ""), fail)
    assert (res.generation, res.training, res.prompt_tokens) == (None, None, 0)
    assert res.errors[0].startswith("openai: request to")


def test_make_compiler_rejects_unknown_backends():
    with pytest.raises(ValueError, match="unknown compiler"):
        C.make_compiler("gpt")
