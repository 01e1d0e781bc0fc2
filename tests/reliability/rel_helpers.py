"""Helpers of the reliability suite (fixtures are in conftest.py): the overrides of the tiny params, metrics
without timings and a garbage LLM endpoint. The params themselves (`make_params`) and the `coda` runner
(`make_coda`, `coda_cli`) are fixtures of tests/conftest.py."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ["pick_place", "push"]
# tests/conftest.py's tiny params with two families, one rehearsal scene per family and every round evaluated
# (the determinism test compares per-round outcomes)
TINY = {"families": FAMILIES, "rehearsal_per_family": 1, "curve_seeds": [0]}
# metrics that measure time, not results (they differ between identical runs)
# for the faulty run: many times a normal job (a worker's first job loads the actor: seconds on a loaded
# machine), so that only the hung one times out
EPISODE_TIMEOUT_S = 30.0
TIMING = ("wall_s", "time_s", "cpu_s", "worker_cpu_s", "schedule_checks")


def without_timing(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k not in TIMING}


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
