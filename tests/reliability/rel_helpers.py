"""Helpers of the reliability suite (fixtures are in conftest.py): the tiny params and a `python -m coda`
runner."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ["pick_place", "push"]
# metrics that measure time, not results (they differ between identical runs)
# for the faulty run: many times a normal job (a worker's first job loads the actor: seconds on a loaded
# machine), so that only the hung one times out
EPISODE_TIMEOUT_S = 30.0
TIMING = ("wall_s", "time_s", "cpu_s", "worker_cpu_s", "schedule_checks")


def without_timing(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k not in TIMING}


class Coda:
    """Runs `python -m coda ...` (in the repository root) and, for `run`, the tiny co-evolution run."""

    def __init__(self, params: Path, data: Path, sft: Path | None = None):
        self.params, self.data, self.sft = params, data, sft

    def __call__(self, *args, check=True, env=None, timeout=600, **kw) -> subprocess.CompletedProcess:
        r = subprocess.run(
            [sys.executable, "-m", "coda", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            timeout=timeout,
            **kw,
        )
        if check:
            assert r.returncode == 0, r.stderr[-3000:]
        return r

    def run_args(self, out: Path, workers: int = 2, params: Path | None = None) -> list[str]:
        return [
            "run",
            "--params",
            str(params or self.params),
            "--profile",
            "smoke",
            "--method",
            "coda",
            "--seed",
            "0",
            "--sft",
            str(self.sft),
            "--out",
            str(out),
            "--data",
            str(self.data),
            "--workers",
            str(workers),
        ]

    def run(self, out: Path, workers: int = 2, params: Path | None = None, **kw):
        return self(*self.run_args(out, workers, params), **kw)


def tiny_params(**coevolve) -> dict:
    """params.yaml with the smoke profile shrunk to the small data set and two families."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    smoke = params["profiles"]["smoke"]
    smoke["data"]["families"] = FAMILIES
    smoke["sft"].update(
        demos_per_family=2, demo_repeats=1, epochs=20, eval_id_per_family=1, eval_ood_per_suite=1
    )
    smoke["coevolve"].update(
        {
            "rounds": 2,
            "envs_per_family": 2,
            "min_pairs": 1,
            "demos_per_family": 1,
            "rehearsal_per_family": 1,
            "critic_steps": 4,
            "policy_updates": 4,
            "batch_size": 16,
            "check_every": 2,
            "scheduling": "adaptive",
            "eval_id_per_family": 1,
            "eval_ood_per_suite": 1,
            "curve_seeds": [0],  # every round evaluated: the determinism test compares per-round outcomes
            **coevolve,
        }
    )
    return params


def write_params(path: Path, params: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(params))
    return path


# replies of a weak (or broken) LLM program writer, served in turn by `GarbageLLM`: prose, JSON that is cut
# off, programs outside the DSL, a program for another family, and server errors
GARBAGE_REPLIES = [
    (200, "The robot should try harder; maybe make the cube lighter."),
    (200, '{"generation": {"operations": [{"op": "sample", "role": "target", "attr'),
    (200, '{"generation": {"operations": [{"op": "explode", "role": "target"}]}, "training": {"tools": 3}}'),
    (200, '{"generation": {"family": "drawer", "operations": []}, "training": null}'),
    (500, '{"error": "model overloaded"}'),
    (200, '{"generation": {"operations": [{"op": "set", "role": "robot", "attribute": "colour"}]}}'),
]


class GarbageLLM:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that never returns a valid program."""

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        llm = self
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, text = GARBAGE_REPLIES[llm.requests % len(GARBAGE_REPLIES)]
                llm.requests += 1
                body = {
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 20},
                }
                data = json.dumps(body).encode() if status == 200 else text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
