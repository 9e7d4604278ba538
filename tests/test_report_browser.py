"""The report opened in headless Chromium, offline: every chart drawn, no console error,
nothing fetched. Skipped only when Chromium is absent outside CI (CI installs it)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import pytest

from contextledger.report import CHART_NAMES, build_charts, collect, write_report

from .conftest import SAMPLE, in_ci
from .test_report import fleet_report, traces_like_report

#: Flags for a sandbox with no network: no background connections, a fresh profile.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)

#: Before the page's own scripts: record console errors and warnings, and uncaught errors.
LISTEN = """<script>
window.__problems = [];
for (const level of ["error", "warn"]) {
  const original = console[level];
  console[level] = (...args) => {
    window.__problems.push(level + ": " + args.join(" "));
    original(...args);
  };
}
const note = (text) => window.__problems.push(text);
window.addEventListener("error", (e) => note("uncaught: " + e.message));
window.addEventListener("unhandledrejection", (e) => note("rejected: " + e.reason));
</script>"""

#: After load: what was rendered and fetched, and where the gates chart's labels and
#: points were drawn, written into the DOM for --dump-dom to show.
REPORT = """<script>
const boxes = (selector) => [...document.querySelectorAll(selector)].map((node) => {
  const r = node.getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom, node.textContent || ""];
});
window.addEventListener("load", () => setTimeout(() => {
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({
    problems: window.__problems,
    fetched: performance.getEntriesByType("resource").map((entry) => entry.name),
    rendered: document.body.dataset.chartsRendered || null,
    chartError: document.body.dataset.chartError || null,
    gates: {
      frame: boxes("#chart-gates .role-frame.root path.background")[0] || null,
      labels: boxes("#chart-gates .mark-text.role-mark text"),
      points: boxes("#chart-gates .mark-symbol.role-mark path"),
    },
    texts: Object.fromEntries(["policies", "policy_cost"].map((name) =>
      [name, boxes(`#chart-${name} .mark-text.role-mark text`)])),
  });
  document.body.appendChild(probe);
}, 1000));
</script>"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    if in_ci():
        pytest.fail("chromium is not installed: .ci/run installs Debian's chromium package")
    pytest.skip("chromium is not installed (apt-get install chromium); CI always runs this test")


#: The pages opened: the sample's; one run with no outcome labels (charts left out); a
#: fleet's ledger of over 10,000 pieces and 1,000 labels; the sample read as traces are (tools
#: only, no labels, no facts).
PAGES = {
    "sample": lambda: collect(),
    "one run, no labels": lambda: collect([SAMPLE / "s0003-loop.json.gz"]),
    "fleet": lambda: fleet_report(),
    "tools only": lambda: traces_like_report(),
}


@cache
def opened_page(which: str) -> tuple[str, dict, list[str]]:
    """A report as Chromium left it: the final DOM, what the probe saw, the charts drawn."""
    browser = chromium()
    data = PAGES[which]()
    with tempfile.TemporaryDirectory() as folder:
        page = write_report(data, folder, formats=())
        text = page.read_text(encoding="utf-8")
        head, _, tail = text.replace("<head>", "<head>\n" + LISTEN, 1).rpartition("</body>")
        probed = Path(folder) / "probed.html"
        probed.write_text(head + REPORT + "</body>" + tail, encoding="utf-8")
        dom = subprocess.run(
            [
                browser,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={Path(folder) / 'profile'}",
                "--virtual-time-budget=15000",
                "--dump-dom",
                probed.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, f"the page never reported back; Chromium printed:\n{dom[:2000]}"
    return dom, json.loads(html.unescape(found.group(1))), list(build_charts(data))


def test_the_sample_page_draws_all_five_charts():
    _, probe, drawn = opened_page("sample")
    assert drawn == list(CHART_NAMES)
    assert probe["rendered"] == str(len(CHART_NAMES))


@pytest.mark.parametrize("which", list(PAGES))
def test_every_chart_is_drawn_as_svg(which: str):
    dom, probe, drawn = opened_page(which)
    assert probe["chartError"] is None
    assert probe["rendered"] == str(len(drawn))
    for name in drawn:
        start = dom.index(f'id="chart-{name}"')
        end = dom.find('id="chart-', start + 1)
        following = dom[start : end if end > 0 else len(dom)]
        assert "<svg" in following and "<path" in following, f"chart {name} drew nothing"


@pytest.mark.parametrize("which", list(PAGES))
def test_the_page_logs_no_console_error_or_warning(which: str):
    _, probe, _ = opened_page(which)
    assert probe["problems"] == []


@pytest.mark.parametrize("which", list(PAGES))
def test_the_page_fetches_nothing(which: str):
    _, probe, _ = opened_page(which)
    assert probe["fetched"] == []


def overlap(a: list, b: list, slack: float = 1.0) -> bool:
    return (
        a[0] + slack < b[2] and b[0] + slack < a[2] and a[1] + slack < b[3] and b[1] + slack < a[3]
    )


def test_the_gates_chart_labels_overlap_nothing_and_stay_inside_the_plot():
    """As Chromium drew them: no label over another label or over a point, none past
    the plot's edge; the pieces not named are left to their tooltips."""
    _, probe, _ = opened_page("sample")
    gates = probe["gates"]
    frame, labels, points = gates["frame"], gates["labels"], gates["points"]
    assert frame is not None and 3 <= len(labels) <= 8 and len(points) > len(labels)
    for i, label in enumerate(labels):
        assert frame[0] - 1 <= label[0] and label[2] <= frame[2] + 1, label
        assert frame[1] - 6 <= label[1] and label[3] <= frame[3] + 6, label
        assert not any(overlap(label, other) for other in labels[i + 1 :]), label
        assert not any(overlap(label, point, slack=2.0) for point in points), label


@pytest.mark.parametrize("which", ["sample", "fleet", "tools only"])
def test_the_window_policy_charts_print_no_number_over_another(which: str):
    """At 10,000 runs sliding:keep=6 and token_budget:threshold=500 were printed on top
    of each other, and a wire count over the axis numbers: every text Chromium drew in
    the two policy charts stands clear of every other."""
    _, probe, _ = opened_page(which)
    for name, texts in probe["texts"].items():
        assert len(texts) >= 10, name
        for i, text in enumerate(texts):
            assert not any(overlap(text, other) for other in texts[i + 1 :]), (name, text)
