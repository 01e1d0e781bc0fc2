"""The page `dvc plots show` writes, made to open with no network.

DVC's default page (`dvc_render.html.PAGE_HTML`) loads Vega, Vega-Lite and Vega-Embed from a CDN, so on a
machine without internet every Vega plot is an empty box. `dvc plots show` takes another page from the
``plots.html_template`` setting (``.dvc/config``; a path relative to ``.dvc/``): `write_template` writes one
with the three libraries inlined, taken from the installed ``vl-convert-python`` package
(`vl_convert.javascript_bundle`, which sets ``window.vega``, ``window.vegaLite`` and ``window.vegaEmbed``, as
the CDN scripts do). The page has no ``{scripts}`` placeholder, so DVC's CDN tags are left out; ``{plot_divs}``
is where DVC puts each plot (a Vega ``<div>`` with its inline `vegaEmbed` call, or an ``<img>`` of a PNG
copied beside the page).

`make venv` writes ``.dvc/plots/offline.html`` (not in git: it is the package's code, 0.9 MB); ``coda report
plots-template`` writes it again, e.g. after upgrading the package.

Example:
    >>> write_template(".dvc/plots/offline.html")
    PosixPath('.dvc/plots/offline.html')
"""

from __future__ import annotations

from pathlib import Path

DEFAULT = Path(".dvc/plots/offline.html")  # what .dvc/config's plots.html_template names
VEGA_LITE = "5.21"  # DVC's plot templates are Vega-Lite v5 specifications
PLACEHOLDER = "{plot_divs}"

_PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<title>CoDA: dvc plots</title>
<!-- Vega {vega}, Vega-Lite {vega_lite}, Vega-Embed {embed}: inlined from vl-convert-python {vlc} -->
<script type="text/javascript">
{bundle}
</script>
<style>
body {{ font-family: sans-serif; margin: 1em; }}
table {{ border-spacing: 15px; }}
</style>
</head>
<body>
{plot_divs}
</body>
</html>
"""


def page(bundle: str, versions: dict[str, str]) -> str:
    """The template around a JavaScript bundle. The bundle must not end the script element early nor hold
    DVC's placeholders (DVC replaces ``{plot_divs}``, ``{scripts}`` and ``{refresh_tag}`` wherever they occur)."""
    bundle = bundle.replace("</script", "<\\/script")
    for name in ("{plot_divs}", "{scripts}", "{refresh_tag}"):
        if name in bundle:
            raise ValueError(f"the JavaScript bundle contains DVC's placeholder {name}")
    # str.format on the page only: the bundle goes in as a value, untouched by formatting
    return _PAGE.format(bundle=bundle, plot_divs=PLACEHOLDER, **versions)


def write_template(out: str | Path = DEFAULT) -> Path:
    """Write the offline page to `out` (its folder is made); returns `out`."""
    import vl_convert as vlc

    versions = {
        "vega": vlc.get_vega_version(),
        "vega_lite": VEGA_LITE,
        "embed": vlc.get_vega_embed_version(),
        "vlc": getattr(vlc, "__version__", "?"),
    }
    text = page(vlc.javascript_bundle(vl_version=VEGA_LITE), versions)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out
