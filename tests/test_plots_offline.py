"""`dvc plots show` with no network: the page loads no script from the internet and every plot renders."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from coda.report.plots_page import DEFAULT, page
from tests._browser import console, headless, needs_browser

ROOT = Path(__file__).resolve().parent.parent


def test_the_page_keeps_the_bundle_inside_its_script_and_dvcs_placeholder_outside():
    text = page(
        'var a = "</script>"; window.vegaEmbed = 1;',
        {"vega": "6", "vega_lite": "5", "embed": "7", "vlc": "1"},
    )
    assert text.count("{plot_divs}") == 1 and "{scripts}" not in text
    assert text.count("</script>") == 1 and "<\\/script>" in text
    with pytest.raises(ValueError, match="plot_divs"):
        page("var x = '{plot_divs}';", {"vega": "6", "vega_lite": "5", "embed": "7", "vlc": "1"})


@needs_browser
def test_dvc_plots_show_renders_every_plot_with_the_network_off(tmp_path):
    template = ROOT / DEFAULT
    assert template.is_file(), (
        f"{template} is missing: `make venv` writes it (or `coda report plots-template`)"
    )
    out = tmp_path / "plots"
    r = subprocess.run(
        [shutil.which("dvc") or "dvc", "plots", "show", "-o", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    html = (out / "index.html").read_text(encoding="utf-8")
    markup = re.sub(r"(<script[^>]*>).*?(</script>)", r"\1\2", html, flags=re.S)  # tags, not script text
    sources = re.findall(r'<(?:script|img|link|iframe)\b[^>]*\b(?:src|href)\s*=\s*"([^"]*)"', markup)
    assert not [s for s in sources if "://" in s], "the page loads something from elsewhere"
    for s in sources:  # the PNG plots are copied beside the page
        assert (out / s).is_file(), s
    vega_divs = re.findall(r'<div id = "([^"]+)">\s*<script', html)
    assert len(vega_divs) >= 2, "dvc.yaml declares the summary stage's two Vega plots"
    # the network off: every http(s) request goes to a closed local port
    res = headless(out / "index.html", "--virtual-time-budget=15000", "--dump-dom")
    dom = res.stdout
    for div in vega_divs:
        m = re.search(rf'<div id="{re.escape(div)}"[^>]*>(.*?)</div>', dom, re.S)
        assert m and ("<canvas" in m.group(1) or "<svg" in m.group(1)), f"plot {div} did not render"
    errors = console(res, r"error|not defined|failed")
    assert not errors, errors
