"""A newcomer's first run, in a folder with nothing but params.yaml (no data/, no SFT policy): ``coda run
--method coda --seed 0 --profile smoke --out DIR`` builds what it needs and exits 0, and ``coda memory report
DIR`` shows the run's failures as keyframe images, in a real browser; so does the report of the run's record
(``coda record``) in a folder that holds nothing else (a fresh clone: no data/, no checkpoints)."""

import base64
import io
import re
import shutil

import pytest
from PIL import Image

from tests._browser import console, headless, needs_browser
from tests.conftest import ROOT


@needs_browser
@pytest.mark.timeout(2400)  # a smoke run from nothing (scenes, SFT, two rounds), then its record and reports
def test_a_smoke_run_in_an_empty_folder_reports_keyframes(coda_cli, tmp_path):
    work = tmp_path / "fresh"
    work.mkdir()
    shutil.copy(ROOT / "params.yaml", work / "params.yaml")
    r = coda_cli(
        "run", "--method", "coda", "--seed", "0", "--profile", "smoke", "--out", "c0", cwd=work, timeout=1500
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (work / "data" / "manifest.json").is_file() and (work / "runs" / "sft" / "policy").is_dir()
    r = coda_cli("memory", "report", "c0", "--out", "r.html", cwd=work, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    html = (work / "r.html").read_text(encoding="utf-8")
    strips = re.findall(r'<img[^>]*class="keyframes"[^>]*src="data:image/png;base64,([^"]+)"', html)
    assert strips, "no keyframe image on the page"
    frame = Image.open(io.BytesIO(base64.b64decode(strips[0]))).convert("L")
    lo, hi = frame.getextrema()
    assert frame.width >= 2 * frame.height and hi - lo > 20  # camera views side by side, not blank
    shot = tmp_path / "shot.png"
    res = headless(work / "r.html", "--window-size=1200,1600", f"--screenshot={shot}")
    assert shot.is_file() and not console(res), console(res)

    r = coda_cli("record", "c0", "rec", cwd=work, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(ROOT / "params.yaml", clone / "params.yaml")
    shutil.copytree(work / "rec", clone / "rec")
    r = coda_cli("memory", "report", "rec", "--out", "page/r.html", cwd=clone, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    html = (clone / "page" / "r.html").read_text(encoding="utf-8")
    strips = re.findall(r'<img[^>]*class="keyframes"[^>]*src="data:image/png;base64,([^"]+)"', html)
    gifs = re.findall(r'<a class="gif" href="([^"]+)"', html)
    assert strips and len(gifs) == len(strips) and "stored with the record" in html
    assert all(Image.open(clone / "page" / gif).n_frames >= 2 for gif in gifs)  # animated, beside the page
    res = headless(clone / "page" / "r.html", "--window-size=1200,1600", f"--screenshot={shot}")
    assert not console(res), console(res)
