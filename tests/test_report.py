"""The HTML report (Summary.to_html, ``daskbatch report``) as a user sees it: opened in headless Chromium.

Real stores, real files, a real browser: each page is loaded by ``chromium --headless`` and
checked from the DOM after its script ran (every section drawn, no script error, no console
message) and from a screenshot (drawn, not blank). Without Chromium those tests skip with the
reason; ``.ci/run`` installs it as root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

import daskbatch as db
from daskbatch.io.outputs import OutputExistsError
from daskbatch.io.synth import synth
from daskbatch.summary.report import REPORT_MARK

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install chromium; .ci/run installs it as root)",
)
#: The bar colour of the feature histograms (report.html).
BAR_RGB = (0x4C, 0x78, 0xA8)
# The new data reach outside the reference's ranges: that is drift, not a problem of the test.
pytestmark = pytest.mark.filterwarnings("ignore::daskbatch.RangeWarning")


def _chromium(url: str, profile: Path, *extra: str) -> tuple[str, str]:
    """Load ``url`` in headless Chromium; its stdout and stderr (console messages are logged there)."""
    assert CHROMIUM is not None
    args = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={profile}",
        *extra,
        url,
    ]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def open_page(path: Path, tmp_path: Path, fragment: str = "") -> str:
    """The DOM of the report at ``path`` after its script ran; fails on a script error or console message."""
    dom, log = _chromium(path.as_uri() + fragment, tmp_path / "profile", "--dump-dom")
    console = [line for line in log.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert not console, console  # the page logs nothing: any message is an error or a warning
    assert 'data-state="drawn"' in dom and "data-error" not in dom, dom[:500]
    return dom


def screenshot_pixels(path: Path, tmp_path: Path) -> np.ndarray:
    """An RGB screenshot of the report at ``path`` (1280 x 2000)."""
    from PIL import Image

    png = tmp_path / "shot.png"
    _chromium(
        path.as_uri(),
        tmp_path / "profile",
        "--hide-scrollbars",
        "--window-size=1280,2000",
        f"--screenshot={png}",
    )
    return np.asarray(Image.open(png).convert("RGB"))


def sections_drawn(dom: str) -> list[str]:
    """The features whose sections the script drew, in page order."""
    return re.findall(r'class="db-feature" id="feature-\d+" data-feature="([^"]*)"', dom)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """A labelled store of 10 features, a drifted one, and their summaries (the new one on the reference's bins)."""
    where = tmp_path_factory.mktemp("report")
    synth(4000, 10, classes=3, correlated=3, seed=1, path=where / "ref.zarr", chunk_rows=1000)
    synth(3000, 10, classes=3, correlated=3, seed=2, path=where / "new.zarr", chunk_rows=1000)
    ref = db.describe(str(where / "ref.zarr"))
    new = db.describe(str(where / "new.zarr"), run=db.RunOptions(like=ref))
    ref.save(where / "ref-summary.zarr")
    new.save(where / "new-summary.zarr")
    return {
        "dir": where,
        "ref": where / "ref-summary.zarr",
        "new": where / "new-summary.zarr",
        "store": where / "new.zarr",
    }


@needs_chromium
def test_report_opens_offline_with_every_section(stores, tmp_path) -> None:
    new, ref = db.load_summary(stores["new"]), db.load_summary(stores["ref"])
    page = tmp_path / "report.html"
    assert new.to_html(page, reference=ref) == str(page)
    text = page.read_text()
    # Self-contained: nothing is fetched (the SVG namespace is a name, not a request).
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", text)
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text)
    dom = open_page(page, tmp_path)
    for section in ("overview", "features", "correlations", "mi", "drift"):
        assert f'<h2 id="{section}">' in dom
    assert sections_drawn(dom) == list(
        new.feature_names
    )  # 10 features: every section drawn at once
    assert dom.count('class="db-hist"') == 2 * 10  # a histogram and the class histograms of each
    assert dom.count('class="db-classes"') == 10 and "class 2" in dom
    assert re.search(r'<div id="db-heatmap"><svg[^>]*>(<text.*?</text>)*<rect', dom)
    top = new.top_mi(1).index[0]
    assert (
        '<th>MI rank</th><td class="num">1 of 10'
        in dom.split(f'data-feature="{top}"')[1].split("</section>")[0]
    )
    drift = db.compare(ref, new).top(1, "psi").index[0]
    assert re.search(
        rf"<tbody><tr><th>{drift}</th>", dom.split('id="drift"')[1]
    )  # the most drifted first
    assert "— reference" in dom  # the reference's histograms are drawn over (same bins)
    pixels = screenshot_pixels(page, tmp_path)
    not_white = np.any(pixels < 240, axis=2).mean()
    bars = np.all(np.abs(pixels.astype(int) - BAR_RGB) < 12, axis=2).sum()
    assert not_white > 0.03 and bars > 2000, (not_white, bars)


@needs_chromium
@pytest.mark.slow
def test_report_of_5000_features_is_small_and_opens_fast(tmp_path) -> None:
    features = 5000
    synth(300, features, classes=3, correlated=20, path=tmp_path / "wide.zarr", chunk_rows=300)
    summary = db.describe(str(tmp_path / "wide.zarr"))
    page = tmp_path / "wide.html"
    started = time.perf_counter()
    summary.to_html(page)
    written = time.perf_counter() - started
    per_feature = page.stat().st_size / features
    assert per_feature < 30_000, per_feature
    name = summary.feature_names[4321]
    started = time.perf_counter()
    dom = open_page(page, tmp_path, f"#feature={name}")
    wall = time.perf_counter() - started
    drawn_ms = int(re.search(r'data-drawn-ms="(\d+)"', dom).group(1))
    print(
        f"5,000 features: {per_feature:,.0f} B per feature, written in {written:.1f} s, "
        f"drawn {drawn_ms} ms after navigation, {wall:.1f} s with Chromium's start"
    )
    assert drawn_ms < 3000
    # Not 5,000 sections: the first ones, and the one the link asked for (first, scrolled to).
    drawn = sections_drawn(dom)
    assert drawn[0] == name and len(drawn) == 51
    assert (
        dom.count("<li><a href=") >= 300 and "5,000 of 5,000 features; the first 300 listed" in dom
    )
    assert "features of the strongest pairs" in dom


@needs_chromium
def test_hostile_names_stay_text(tmp_path) -> None:
    names = (
        "</script><script>document.title='x'</script>",
        "__DATA__",
        "<b>bold</b>",
        "a\"b'c",
        "ünï ✓",
        "",
    )
    x = np.random.default_rng(3).normal(size=(500, len(names)))
    summary = db.describe(x, np.arange(500) % 2, run=db.RunOptions(feature_names=names))
    page = tmp_path / "names.html"
    summary.to_html(page, title="</title><script>bad()</script>")
    dom = open_page(page, tmp_path)
    assert sections_drawn(dom) == [
        "&lt;/script&gt;&lt;script&gt;document.title='x'&lt;/script&gt;",
        "__DATA__",
        "&lt;b&gt;bold&lt;/b&gt;",
        "a&quot;b'c",
        "ünï ✓",
        "",
    ]
    assert "<b>bold</b>" not in dom
    assert (
        dom.count("</script>") == 2
    )  # the page's data and its script: no name or title ended one or added one
    assert "<title>&lt;/title&gt;&lt;script&gt;bad()&lt;/script&gt;</title>" in dom


@needs_chromium
@pytest.mark.parametrize("case", ["moments only", "bins not shared"])
def test_report_of_less_complete_summaries(tmp_path, case: str) -> None:
    x = np.random.default_rng(5).normal(size=(800, 4))
    if case == "moments only":  # no histograms, correlations, label: the sections that exist, drawn
        summary, reference = db.describe(x, stats=("moments",)), None
    else:  # described without like=: compare rebins one side onto the other's edges, and the page says so
        summary, reference = db.describe(x), db.describe(x[:400] + 0.5)
    page = tmp_path / "less.html"
    summary.to_html(page, reference=reference)
    dom = open_page(page, tmp_path)
    assert len(sections_drawn(dom)) == 4
    if case == "moments only":
        assert 'id="correlations"' not in dom and 'class="db-hist"' not in dom
        assert "<th>mean</th>" in dom
    else:
        assert "ranked by psi" in dom and "different histogram bins" in dom and "approximate" in dom


def test_report_marks_itself_and_replaces_only_its_own(stores, tmp_path) -> None:
    summary = db.load_summary(stores["new"])
    page = tmp_path / "r.html"
    summary.to_html(page)
    assert page.read_text().splitlines()[1] == REPORT_MARK
    summary.to_html(page, title="again")  # our own report: replaced
    assert "<title>again</title>" in page.read_text()
    foreign = tmp_path / "notes.html"
    foreign.write_text("<!DOCTYPE html>\n<p>my notes</p>")
    with pytest.raises(
        OutputExistsError, match=r"notes.html already exists and is not a daskbatch"
    ):
        summary.to_html(foreign)
    assert foreign.read_text() == "<!DOCTYPE html>\n<p>my notes</p>"
    link = tmp_path / "link.html"
    link.symlink_to(foreign)
    with pytest.raises(OutputExistsError):
        summary.to_html(link)
    assert foreign.read_text() == "<!DOCTYPE html>\n<p>my notes</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "link.html",
        "notes.html",
        "r.html",
    ]  # nothing left over


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m daskbatch`` with ``args``."""
    return subprocess.run(
        [sys.executable, "-m", "daskbatch", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(Path(db.__file__).parents[1])},
    )


@needs_chromium
def test_cli_report_from_a_summary_and_from_a_store(stores, tmp_path) -> None:
    done = _cli(
        "report",
        str(stores["new"]),
        "-o",
        "s.html",
        "--reference",
        str(stores["ref"]),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "report written to s.html"
    assert 'id="drift"' in open_page(tmp_path / "s.html", tmp_path)
    done = _cli(
        "report", str(stores["store"]), "-o", "d.html", "--title", "described now", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    dom = open_page(tmp_path / "d.html", tmp_path)
    assert "<title>described now</title>" in dom and len(sections_drawn(dom)) == 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{new}", "-o", "mine.html"], r"mine.html already exists and is not a daskbatch report"),
        (["{new}", "-o", "{new}/inside.html"], r"inside the STORE\|SUMMARY; choose another path"),
        (["{new}", "-o", "nodir/r.html"], r"directory .*nodir does not exist"),
        (["missing.zarr", "-o", "r.html"], r"no store or summary at missing.zarr"),
        (
            ["{new}", "-o", "r.html", "--reference", "{store}"],
            r"is not a daskbatch summary \(it holds arrays X, y, it is a daskbatch synth output\)",
        ),
    ],
)
def test_cli_refusals_are_one_line_and_touch_nothing(
    stores, tmp_path, args: list[str], message: str
) -> None:
    (tmp_path / "mine.html").write_text("mine")
    before = sorted(str(p) for p in stores["dir"].rglob("*"))
    done = _cli(
        "report", *(a.format(new=stores["new"], store=stores["store"]) for a in args), cwd=tmp_path
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(message, lines[0]), lines
    assert (tmp_path / "mine.html").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.html"]
    assert sorted(str(p) for p in stores["dir"].rglob("*")) == before


@needs_chromium
def test_overview_lists_what_the_summary_warns_about(tmp_path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 5))
    x[:, 0] = 0.0  # constant (and the fill value of the absent chunk)
    x[:600, 1] = np.nan  # NaN-heavy
    x[:400, 2] = -999.0  # a sentinel for "missing"
    x[:5, 3], x[5:9, 3] = np.inf, -np.inf
    x[:, 4] *= 10  # mostly outside the range given
    group = zarr.open_group(str(tmp_path / "awkward.zarr"), mode="w")
    group.create_array("X", shape=x.shape, chunks=(500, 5), dtype="f8")[:] = x
    os.remove(tmp_path / "awkward.zarr" / "X" / "c" / "1" / "0")  # absent: read as the fill value
    with pytest.warns(UserWarning):  # the covariance's dropped rows, the sentinel
        summary = db.describe(str(tmp_path / "awkward.zarr"), range=(-3.0, 3.0))
    page = tmp_path / "awkward.html"
    summary.to_html(page)
    warnings = (
        re.search(r"<ul class='db-warnings'>(.*?)</ul>", page.read_text())
        .group(1)
        .split("<li>")[1:]
    )
    expected = [
        "constant feature",
        "outside the histogram range: f2 (20.2%), f4",
        "more than 5% NaN: f1",
        "use only the",
        "1 chunk absent from the store, read as their fill value",
    ]
    assert len(warnings) == len(expected) and all(
        e in w for e, w in zip(expected, warnings, strict=True)
    ), warnings
    with pytest.warns(
        UserWarning
    ):  # on the data's own ranges (the sketch's buckets judged): the sentinel
        db.describe(str(tmp_path / "awkward.zarr")).to_html(tmp_path / "own-ranges.html")
    assert (
        "f2 -999 (the min): 400 values in its bucket" in (tmp_path / "own-ranges.html").read_text()
    )
    dom = open_page(page, tmp_path)  # NaN and infinite values drawn without a script error
    assert len(sections_drawn(dom)) == 5 and "-inf" in dom
