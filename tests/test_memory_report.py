"""`coda memory report RUN --out report.html`: a self-contained HTML page about a run's memory."""

import json
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

from coda.memory.shared_memory import Memory
from coda.memory.store import latest_snapshot, load_snapshot
from coda.report.memory_report import esc, failures_section, modes_section, program_details
from tests._browser import console, headless, needs_browser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class StrictParser(HTMLParser):
    """Collects the problems `html.parser` lets through: unbalanced tags, duplicate ids, external URLs (a
    relative link to a GIF beside the page is kept in `files`), scripts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.errors, self.ids, self.images, self.links = [], [], set(), [], []
        self.files = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.errors.append("script element")
        if "id" in attrs:
            if attrs["id"] in self.ids:
                self.errors.append(f"duplicate id {attrs['id']}")
            self.ids.add(attrs["id"])
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            relative_gif = key == "href" and value.endswith(".gif") and not value.startswith("/")
            if relative_gif and ":" not in value and ".." not in value.split("/"):
                self.files.append(value)
            elif value and not value.startswith(("#", "data:image/png;base64,")):
                self.errors.append(f"external {key} {value[:60]}")
        if attrs.get("href", "").startswith("#"):
            self.links.append(attrs["href"])
        if tag == "img":
            self.images.append(attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"unbalanced </{tag}> (open: {self.stack[-3:]})")
        else:
            self.stack.pop()


def parse(text: str) -> StrictParser:
    p = StrictParser()
    p.feed(text)
    p.close()
    assert not p.errors, p.errors[:5]
    assert not p.stack, f"unclosed: {p.stack}"
    return p


@pytest.fixture(scope="module")
def coda_setup(make_coda, make_params, small_data, tmp_path_factory):
    """A finished two-round `coda` run on the tiny params (one worker: light on the CPU): (run directory,
    params file, SFT directory); its records keep up to 8 keyframe strips, the cpu profile's number."""
    params = make_params(sim={"record_keyframes": 8})
    runner = make_coda(params, small_data)
    sft = tmp_path_factory.mktemp("sft")
    runner.train_sft(sft, workers=1, timeout=600)
    out = tmp_path_factory.mktemp("coda") / "run"
    runner(*runner.run_args(out, workers=1, method="coda"), timeout=900)
    return out, params, sft


@pytest.fixture(scope="module")
def coda_run(coda_setup):
    return coda_setup[0]


@pytest.fixture(scope="module")
def report_path(coda_setup, small_data, coda_cli, tmp_path_factory):
    coda_run, params, sft = coda_setup
    out = tmp_path_factory.mktemp("report") / "report.html"
    r = coda_cli(
        "memory",
        "report",
        coda_run,
        "--out",
        out,
        "--data",
        small_data,
        "--image-size",
        48,
        "--params",
        params,
        "--sft",
        sft,
        check=True,
    )
    assert str(out) in r.stdout
    return out


@pytest.fixture(scope="module")
def report(report_path):
    return report_path.read_text(encoding="utf-8")


def test_the_keyframes_are_saved_beside_the_page(report_path, report, coda_run):
    """Every re-simulated failure on the page is also a PNG strip and a GIF, indexed in keyframes.json, and
    the page links each GIF."""
    from PIL import Image

    from coda.report.keyframes import STRIP_GAP
    from coda.report.render import band_height

    folder = report_path.with_name("report_keyframes")
    rows = json.loads((folder / "keyframes.json").read_text())
    assert len(rows) == report.count('class="keyframes"') > 0
    assert sorted(parse(report).files) == sorted(f"report_keyframes/{row['gif']}" for row in rows)
    mem = load_snapshot(latest_snapshot(coda_run))
    diagnoses = {d["diagnosis_id"]: d for d in mem.rows("diagnoses")}
    for row in rows:
        d = diagnoses[row["diagnosis_id"]]
        assert (row["mode_id"], row["rollout_id"]) == (d["mode_id"], d["rollout_id"])
        assert row["matches"] == (not row["differences"])
        assert row["matches"], row[
            "differences"
        ]  # `coda memory report` runs under the pin: every bit reproduces
        n, band = len(row["frames"]), band_height(48)  # each frame under its label
        png = Image.open(folder / row["png"])
        assert png.size == (48 * 2 * n + STRIP_GAP * (n - 1), 48 + band)  # frames left to right: front | rear
        gif = Image.open(folder / row["gif"])
        assert gif.n_frames == len(row["frames"]) and gif.size == (96, 48 + band)


def test_the_report_names_modes_programs_and_causes(report, coda_run):
    page = parse(report)
    mem = load_snapshot(latest_snapshot(coda_run))
    modes = mem.modes()
    assert modes, "the tiny run opened no difficulty mode"
    for m in modes:
        assert esc(m.mode_id) in report
    for pid, doc in mem.programs().items():
        assert f'id="program-{pid}"' in report
        assert esc(json.dumps(doc, indent=2, sort_keys=True)) in report
    causes = [d["cause"] for d in mem.rows("diagnoses") if d["mode_id"] is not None]
    assert any(esc(c) in report for c in causes)
    scenes = [i for i in page.images if i.get("class") in ("scene", "keyframes")]
    assert scenes and all(i["src"].startswith("data:image/png;base64,") for i in scenes)
    assert len(scenes) <= 24
    assert any(i.get("class") == "keyframes" for i in scenes)  # the failing rollouts, re-simulated
    assert "re-simulated (matches the recorded rollout)" in report or "re-simulated (differs" in report
    assert any(i.get("class") == "chart" for i in page.images)  # the loss chart at least
    run = json.loads((coda_run / "run.json").read_text())
    assert f"<td>{run['method']}</td>" in report
    assert page.links and all(link[1:] in page.ids for link in page.links)  # every anchor link lands


def test_the_report_without_data_says_so(coda_run, coda_cli, tmp_path):
    out = tmp_path / "r.html"
    coda_cli("memory", "report", coda_run, "--out", out, "--data", tmp_path / "missing", check=True)
    text = out.read_text()
    page = parse(text)
    assert not [i for i in page.images if i.get("class") == "scene"]
    assert "data folder" in text and "is missing" in text


@pytest.mark.parametrize("make", ["missing", "empty", "no-snapshot"])
def test_a_missing_or_invalid_run_is_one_line(make, coda_cli, tmp_path):
    run = tmp_path / "run"
    if make != "missing":
        run.mkdir()
    if make == "no-snapshot":
        (run / "run.json").write_text('{"method": "coda"}')
    r = coda_cli("memory", "report", run, "--out", tmp_path / "r.html")
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and str(run) in r.stderr
    assert not (tmp_path / "r.html").exists()


@pytest.fixture(scope="module")
def records(coda_setup, small_data, coda_cli, tmp_path_factory):
    """The tiny run recorded twice: by `coda record` (a process under the numerics pin) and by
    `coda.maintenance.record` called from this process (not under the pin: it re-simulates in a child that
    is)."""
    from coda.maintenance import record

    run, params, sft = coda_setup
    base = tmp_path_factory.mktemp("records")
    r = coda_cli(
        "record", run, base / "cli", "--data", small_data, "--sft", sft, "--params", params, check=True
    )
    made = json.loads(r.stdout.strip().splitlines()[-1])
    record(run, base / "py", data_dir=small_data, params=params, sft_dir=sft)
    return base / "cli", base / "py", made


def test_the_record_stores_keyframes_of_a_few_failures(records, coda_run, coda_setup):
    """``RECORD/keyframes/``: at most one failure per mode of the last snapshot and `sim.record_keyframes`
    (here 8) in all, each of
    the diagnoses the report lists first for its mode, re-simulated as recorded (under the pin), as a PNG
    strip and a GIF of 160 px views under labels; a few hundred kB at most."""
    from PIL import Image

    from coda.config import load_params
    from coda.report.keyframes import STRIP_GAP, record_candidates
    from coda.report.render import band_height

    rec, _, made = records
    mem = load_snapshot(latest_snapshot(coda_run))
    rows = json.loads((rec / "keyframes" / "keyframes.json").read_text())
    limit = load_params(coda_setup[1], "smoke").sim.record_keyframes
    candidates = record_candidates(mem, limit=limit)
    assert made["keyframes"]["stored"] == len(rows) == min(limit, len(candidates)) > 0
    assert [row["mode_id"] for row in rows] == [m.mode_id for m, _ in candidates][: len(rows)]
    for row, (_, diagnoses) in zip(rows, candidates):
        assert row["diagnosis_id"] in [d["diagnosis_id"] for d in diagnoses]
        assert row["matches"], row["differences"]
        n = len(row["frames"])
        png = Image.open(rec / "keyframes" / row["png"])
        assert png.size == (160 * 2 * n + STRIP_GAP * (n - 1), 160 + band_height(160))
        assert Image.open(rec / "keyframes" / row["gif"]).n_frames == len(row["frames"])
    size = sum(p.stat().st_size for p in (rec / "keyframes").iterdir())
    assert size == made["keyframes"]["bytes"] < 400_000
    assert not (rec / "rounds").exists()  # still no checkpoints


def test_recording_the_run_twice_stores_the_same_bytes(records):
    from coda.maintenance import compare_runs

    cli, py, _ = records
    files = sorted(p.relative_to(cli) for p in (cli / "keyframes").iterdir())
    assert files == sorted(p.relative_to(py) for p in (py / "keyframes").iterdir())
    for rel in files:
        assert (cli / rel).read_bytes() == (py / rel).read_bytes(), rel
    assert compare_runs(cli, py)["different"] == []


def test_the_report_of_a_record_shows_the_stored_keyframes(records, coda_setup, coda_cli, tmp_path):
    """On a record, from a folder with neither data/ nor runs/sft (a fresh clone without the DVC cache): the
    stored keyframes, each GIF copied beside the page and linked, and the record left as it was."""
    rec, _, _ = records
    params = coda_setup[1]
    before = {p: p.read_bytes() for p in rec.rglob("*") if p.is_file()}
    coda_cli("memory", "report", rec, "--out", "page/r.html", "--params", params, cwd=tmp_path, check=True)
    out = tmp_path / "page" / "r.html"
    html = out.read_text(encoding="utf-8")
    page = parse(html)
    rows = json.loads((rec / "keyframes" / "keyframes.json").read_text())
    assert html.count('class="keyframes"') == len(rows) > 0
    assert html.count("stored with the record: re-simulated (matches the recorded rollout)") == len(rows)
    assert sorted(page.files) == sorted(f"r_keyframes/{row['gif']}" for row in rows)
    for link in page.files:
        assert (out.parent / link).read_bytes() == (rec / "keyframes" / link.split("/")[-1]).read_bytes()
    assert "no checkpoint to re-simulate" not in html
    assert {p: p.read_bytes() for p in rec.rglob("*") if p.is_file()} == before


# Re-simulation reproduces bits only in a process that started under the numerics pin (glibc's libm and
# NumPy read it at start), as `coda` processes do; the test process did not, so the renderer runs in one.
_RESIMULATE = """
import json, sys
from coda.memory.store import latest_snapshot, load_snapshot
from coda.report.keyframes import KeyframeRenderer
run, data, params, sft = sys.argv[1:5]
mem = load_snapshot(latest_snapshot(run))
specs = {s["scene_hash"]: s["spec_json"] for s in mem.rows("scenes")}
rollouts = {r["rollout_id"]: r for r in mem.rows("rollouts")}
out = {1: [], 2: []}
renderer = KeyframeRenderer(run, data, params=params, sft_dir=sft, image_size=32)
try:
    for d in mem.rows("diagnoses"):
        r = int(d["round"])
        if r in out and len(out[r]) < 2 and d["scene_hash"] in specs:
            kf = renderer(d, rollouts.get(d["rollout_id"]), specs[d["scene_hash"]])
            out[r].append(None if kf is None else {
                "label": kf.label, "resimulated": kf.resimulated, "differences": kf.differences,
                "frames": [[list(f.shape), str(f.dtype), float(f.std())] for _, f in kf.frames],
            })
finally:
    renderer.close()
print(json.dumps(out))
"""


def test_failing_rollouts_are_resimulated_from_the_checkpoints(coda_setup, small_data, capsys):
    """Round 2's rollouts (round 1's checkpoint) and round 1's (the SFT policy, an untrained critic),
    re-simulated in a process under the numerics pin: the outcome equals the recorded one, and the frames
    are non-blank camera views."""
    import os
    import sys

    from coda import numerics
    from coda.report.keyframes import MAX_FRAMES

    run, params, sft = coda_setup
    env = {**os.environ, **numerics.pinned_env()}
    proc = subprocess.run(
        [sys.executable, "-c", _RESIMULATE, str(run), str(small_data), str(params), str(sft)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = {int(r): kfs for r, kfs in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    assert all(kf is not None for kfs in results.values() for kf in kfs), (
        "the checkpoint is in the run directory"
    )
    with capsys.disabled():
        for r, kfs in results.items():
            print(f"\nround {r}: " + "; ".join(f"{k['label']} {k['resimulated']}" for k in kfs))
    assert results[2], "no diagnosed failure in round 2 of the tiny run"
    for kf in results[1] + results[2]:
        assert not kf["differences"], kf["differences"]
        assert 2 <= len(kf["frames"]) <= MAX_FRAMES
        for shape, dtype, std in kf["frames"]:
            assert shape == [32, 64, 3] and dtype == "uint8"
            assert std > 1.0  # not blank
    assert "re-simulated (matches the recorded rollout)" in [k["label"] for k in results[2]]


def _memory_with(cause: str) -> Memory:
    mem = Memory(encoder=lambda texts: np.ones((len(texts), 4)) / 2.0)
    spec = {"family": "push", "note": "</pre><script>x</script>"}
    mem.add_scene("abc123", "push", 1, "novel", spec)
    rid = mem.add_rollout("abc123", "push", 1, "novel", False, 1, 10, 0)
    did = mem.add_diagnosis(rid, "abc123", "push", 1, "v", "reach", "mass", cause, 0.5)
    mem.assign_mode(did)
    return mem


def test_memory_text_is_escaped():
    evil = "<script>alert('x')</script> & \"quoted\""
    mem = _memory_with(evil)
    seen = []

    def render(spec_json, *_):
        seen.append(spec_json)
        return "<img class='scene' alt='x' src='data:image/png;base64,AA=='>"

    for html in (failures_section(mem, render), modes_section(mem), failures_section(mem, None, evil)):
        assert "<script>" not in html
        parse(html)
    assert esc(evil) in failures_section(mem, render)
    assert seen and json.loads(seen[0])["note"].startswith("</pre>")  # the spec reaches the renderer as is
    doc = {"id": "gp-1", "kind": "generation", "family": "<b>push</b>", "mode": "<i>m</i>", "x": "<script>"}
    html = program_details(
        "gp-<1>", doc, [{"scene_hash": "<h>", "split": "targeted", "base_hash": None, "round": 1}], {}
    )
    assert "<script>" not in html and "<b>" not in html and "<h>" not in html
    assert 'id="program-gp-&lt;1&gt;"' in html
    parse(html)


def test_validated_modes_come_first_and_are_charted_per_round():
    import copy

    from coda.report.memory_report import sorted_modes, trends_section

    mem = _memory_with("the gripper slipped")
    rid = mem.add_rollout("abc123", "push", 1, "novel", False, 1, 10, 0)
    other = mem.add_diagnosis(rid, "abc123", "push", 1, "v", "lift", "friction", "it fell", 0.5)
    validated = mem.assign_mode(other)
    mem.set_mode_status(validated, "validated")
    mem.update_mode(validated, 0.5, 4, 10, 1)
    round1 = copy.deepcopy(mem)
    mem.update_mode(validated, 0.9, 4, 20, 2)
    assert sorted_modes(mem)[0].mode_id == validated
    html = trends_section({1: round1, 2: mem}, mem)
    page = parse(html)
    charts = [i for i in page.images if i.get("class") == "chart"]
    assert len(charts) == 2 and all(i["src"].startswith("data:image/png;base64,") for i in charts)
    assert "no validated modes" in trends_section({1: round1}, _memory_with("x"))


@needs_browser
def test_a_headless_browser_renders_the_report_without_console_errors(
    coda_run, small_data, coda_cli, tmp_path
):
    """The report in a real browser (Chromium, headless): it loads with no console message at all (the page
    has no scripts; a broken image or markup problem would log one) and its screenshot is not blank."""
    out = tmp_path / "report.html"
    coda_cli("memory", "report", coda_run, "--out", out, "--data", small_data, check=True)
    shot = tmp_path / "shot.png"
    res = headless(out, "--window-size=1200,1600", f"--screenshot={shot}")
    assert shot.is_file(), res.stderr[-2000:]
    assert not console(res), console(res)
    from matplotlib import image

    pixels = image.imread(shot)
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    assert pixels[..., :3].std() > 0.05  # not a blank page: text, tables, charts, scene images
