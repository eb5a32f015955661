"""report.html opened in a real browser: a simulated run's page (complete, partial, with two jobs),
a series of seeds', a study's, a sensitivity study's and a jobs study's each render in headless Chromium (Debian's chromium,
which setup.sh installs) with every plot decoded at its own size and the verdicts and numbers of
their JSON on the page, from a copy of the page alone in another folder with name resolution off:
readable offline, nothing fetched.

The page has no script by design, so each test adds one to a copy: on load it writes what the
browser made of the page (the text as shown, each image's decoded size, every resource fetched)
into a <pre id="rendered"> as JSON, and `chromium --headless --dump-dom` prints the DOM with it.
A missing chromium fails (CI installs it), it does not skip. The runs are simulations (no root,
a few seconds each).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collectors.pages.run import write_run_report
from emulator.studies.interference.page import write_study_report
from emulator.studies.interference.study import analyse
from tests.integration.test_sensitivity_sim import SCENARIO as SENSITIVITY_SCENARIO
from tests.integration.test_several_jobs import TWO
from tests.integration.test_sim_backend import SMALL
from tests.unit.test_study import NOISY_AR, STEADY_A2A, STEADY_AR, TAILED_A2A, write_repeats

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_TIMEOUT_S = 120
RUN_TIMEOUT_S = 300

PROBE = """<script>
addEventListener("load", () => {
  const images = Array.from(document.images, (img) => ({
    alt: img.alt,
    complete: img.complete,
    width: img.naturalWidth,
    height: img.naturalHeight,
    shown_px: img.getBoundingClientRect().width,
  }));
  const fetched = performance.getEntriesByType("resource").map((entry) => entry.name);
  const found = { title: document.title, text: document.body.innerText, images, fetched };
  const out = document.createElement("pre");
  out.id = "rendered";
  out.textContent = JSON.stringify(found);
  document.body.append(out);
});
</script>
"""
RENDERED = re.compile(r'<pre id="rendered">(.*?)</pre>', re.DOTALL)


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail(
            "this test opens report.html in headless Chromium, but `chromium` is not installed: "
            "apt-get install --no-install-recommends chromium (./setup.sh installs it)"
        )
    return found


def rendered(page: Path, tmp_path: Path, extra: str = "") -> dict[str, Any]:
    """What headless Chromium made of a copy of `page` (alone in a folder of its own, with the
    probe and `extra` markup appended): title, text as shown, images, resources fetched."""
    text = page.read_text()
    assert "<script" not in text.lower(), f"{page}: the page itself has no script"
    copy = tmp_path / "opened" / page.name
    copy.parent.mkdir(parents=True)
    copy.write_text(text.replace("</body>", f"{extra}{PROBE}</body>"))
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",  # as root (CI) Chromium refuses to start sandboxed
        "--disable-gpu",
        "--disable-dev-shm-usage",  # a container's small /dev/shm
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",  # not ~/.config: its own, thrown away
        "--host-resolver-rules=MAP * ~NOTFOUND",  # offline: no name resolves
        "--dump-dom",
        copy.as_uri(),
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=CHROMIUM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the browser and the children it started
        proc.communicate()
        pytest.fail(f"chromium did not print {copy} within {CHROMIUM_TIMEOUT_S} s")
    found = RENDERED.search(out)
    assert proc.returncode == 0 and found, (
        f"chromium exited {proc.returncode} without the probe's result; stderr:\n{err[-3000:]}"
    )
    result: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return result


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def assert_every_plot_shown(found: dict[str, Any], folder: Path) -> None:
    """Each PNG under folder/plots on the page, in order, decoded at its own size and laid out;
    nothing fetched from anywhere (the plots are inside the page)."""
    pngs = sorted((folder / "plots").rglob("*.png"))
    assert pngs, f"{folder}: no plot to show"
    images = found["images"]
    assert [(i["width"], i["height"]) for i in images] == [png_size(p) for p in pngs]
    assert all(i["complete"] and i["width"] > 0 and i["shown_px"] > 0 for i in images), images
    assert found["fetched"] == []


def lines_of(found: dict[str, Any]) -> list[str]:
    return [line.strip() for line in found["text"].splitlines() if line.strip()]


def row(found: dict[str, Any], *first: str) -> list[str]:
    """The cells of the one table row whose first cells are `first` (innerText: tab-separated)."""
    rows = [
        cells
        for cells in ([c.strip() for c in line.split("\t")] for line in lines_of(found))
        if cells[: len(first)] == list(first)
    ]
    assert len(rows) == 1, f"one row {first} expected: {rows}"
    return rows[0]


def fact(found: dict[str, Any], name: str) -> str:
    """The value shown for `name` in a list of facts (<dl>: the term, then its value below)."""
    lines = lines_of(found)
    values = [lines[k + 1] for k, line in enumerate(lines[:-1]) if line == name]
    assert len(values) == 1, f"one fact {name!r} expected: {values}"
    return values[0]


def emulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "emulator.cli", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def small_scenario(tmp_path: Path, extra_sim: str = "") -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL.format(seed=3).replace("sim:\n", f"sim:\n{extra_sim}"))
    return path


def test_the_harness_sees_an_image_that_does_not_decode(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(
        "<!doctype html><html><head><title>t</title></head><body><p>x</p></body></html>"
    )
    broken = '<img alt="broken" src="data:image/png;base64,AAAA">'
    found = rendered(page, tmp_path, extra=broken)
    (image,) = found["images"]
    assert image["alt"] == "broken" and image["complete"] and image["width"] == 0


def test_a_simulated_run_s_page_renders_with_every_plot(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = emulate("run", str(small_scenario(tmp_path)), "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    page = out / "report.html"
    assert f"report:  {page}" in done.stdout.splitlines()
    summary = json.loads((out / "summary.json").read_text())
    found = rendered(page, tmp_path)

    assert found["title"] == "small_mix: run report"
    lines = lines_of(found)
    assert "Run report: small_mix" in lines and "backend sim, simulated time" in lines
    assert f"Fidelity: {summary['fidelity']['verdict']}" in lines
    assert not any(line.startswith("Partial run") for line in lines)
    assert fact(found, "job time") == f"{summary['job_time_s']:.6f} s"
    assert fact(found, "seed") == "3" and fact(found, "flows finished") == "128 of 128"
    for ctype, stats in summary["collectives"].items():
        cells = row(found, ctype)
        assert cells[1] == str(stats["instances"])
        assert cells[2] == f"{stats['busbw_mean_bytes_per_s'] / 1e9:.2f}"
        assert cells[-1] == str(stats["ce_marks"])
    assert set(summary["collectives"]) == {"ALL_REDUCE", "ALL_TO_ALL"}
    assert_every_plot_shown(found, out)


def test_a_partial_run_s_page_says_so(tmp_path: Path) -> None:
    # stopped after 0.5 ms of the ~1.7 ms job: the error's exit, the folder kept and its page
    out = tmp_path / "partial"
    scenario = small_scenario(tmp_path, extra_sim="  time_limit_s: 0.0005\n")
    done = emulate("run", str(scenario), "--out", str(out), "--no-progress")
    assert done.returncode == 2 and "sim.time_limit_s" in done.stderr, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True
    found = rendered(out / "report.html", tmp_path)
    lines = lines_of(found)
    assert "Partial run: interrupted or failed: fewer samples" in lines
    assert f"Fidelity: {summary['fidelity']['verdict']}" in lines
    assert "the run did not finish (partial results): what it measured is a part" in lines
    assert_every_plot_shown(found, out)


def test_a_series_of_seeds_page_renders_and_links_each_run_s_page(tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    scenario = small_scenario(tmp_path)
    done = emulate("run", str(scenario), "--seeds", "2", "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert f"report: {out / 'report.html'}" in done.stdout.splitlines()
    seeds = json.loads((out / "seeds.json").read_text())
    found = rendered(out / "report.html", tmp_path / "series")
    lines = lines_of(found)
    assert "Seeds: 2 runs" in lines
    busbw = seeds["estimates"]["ALL_REDUCE"]["busbw_mean_bytes_per_s"]
    low, high = busbw["ci"]
    assert row(found, "ALL_REDUCE", "busbw_mean_bytes_per_s")[2:5] == [
        f"{busbw['point'] / 1e9:.4g}",
        f"[{low / 1e9:.4g}, {high / 1e9:.4g}]",
        "GB/s",
    ]
    assert found["images"] == [] and found["fetched"] == []  # a series has no plots of its own
    # each seed's run wrote its own page, which renders too and which the series links
    page = out / "report.html"
    assert 'href="seed-3/report.html"' in page.read_text()
    assert 'href="seed-4/report.html"' in page.read_text()
    run = rendered(out / "seed-4" / "report.html", tmp_path / "seed-4")
    assert fact(run, "seed") == "4"
    assert_every_plot_shown(run, out / "seed-4")


def test_a_study_s_page_renders_with_every_plot(tmp_path: Path) -> None:
    # the unit tests' results folders with known numbers (tests/unit/test_study.py), inside the
    # study's folder as a study writes them, each with its page: the All-Reduce steady alone
    # and noisy mixed, the All-to-All tailed mixed
    out = tmp_path / "study"
    runs = out / "runs"
    folders = {
        "allreduce_only": write_repeats(runs, "ar", "allreduce_only", ar=STEADY_AR),
        "alltoall_only": write_repeats(runs, "a2a", "alltoall_only", a2a=STEADY_A2A),
        "mixed": write_repeats(runs, "mixed", "moe_mix", NOISY_AR, TAILED_A2A, a2a_cnps=7),
    }
    for folder in (f for repeats in folders.values() for f in repeats):
        write_run_report(folder)
    result = analyse(folders, out)
    page = write_study_report(out)
    found = rendered(page, tmp_path)

    assert found["title"] == "interference study: report"
    lines = lines_of(found)
    assert "Study: interference" in lines
    shown = sum(c.verdict == "shown" for c in result.checks)
    assert shown >= 1  # the mixed All-Reduce's CV, at least, is clearly higher
    every = all(c.shown for c in result.checks)
    verdict = "every check shown" if every else f"{shown} of {len(result.checks)} shown"
    assert f"Checks: {verdict}" in lines
    for check in result.checks:
        assert f"{check.name} {check.verdict}" in lines
    text = page.read_text()
    for role, repeats in folders.items():
        for folder in repeats:
            assert f'href="runs/{folder.name}/report.html"' in text, (role, folder)
    assert_every_plot_shown(found, out)


def test_a_sensitivity_study_s_page_renders_and_links_each_rate_s_run(tmp_path: Path) -> None:
    # the integration test's small MoE step (tests/integration/test_sensitivity_sim.py), simulated
    # at 400 and 100 Gb/s: a few seconds
    scenario = tmp_path / "sensitivity_small.yaml"
    scenario.write_text(SENSITIVITY_SCENARIO)
    out = tmp_path / "sensitivity"
    done = emulate(
        "study", "sensitivity", str(scenario), "--link-gbps", "400,100", "--out", str(out),
        "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    page = out / "report.html"
    assert f"report: {page}" in done.stdout.splitlines()
    doc = json.loads((out / "sensitivity.json").read_text())
    found = rendered(page, tmp_path)

    assert found["title"] == "sensitivity study: report"
    lines = lines_of(found)
    assert "Study: sensitivity" in lines
    assert fact(found, "scenario") == str(scenario)
    assert fact(found, "link rates") == "400, 100 Gb/s" and fact(found, "reference") == "400 Gb/s"
    assert set(doc["collectives"]) == {"ALL_REDUCE", "ALL_TO_ALL"}
    for name, judged in {**doc["collectives"], "job": doc["job"]}.items():
        assert f"{name}: {judged['verdict']}" in lines and judged["detail"] in lines
        at_400, at_100 = judged["by_rate"]
        assert row(found, name, judged["verdict"])[2:] == [
            f"{at_400['time_s'] * 1e3:.3f}",
            f"{at_100['time_s'] * 1e3:.3f}",
            f"{at_100['slowdown']:.2f}x",
            f"{at_100['plan_slowdown']:.2f}x",
            "4.00x",  # the rate ratio
        ]
    # each rate's run, linked relatively to its own page
    text = page.read_text()
    for rate in (400, 100):
        assert f'href="runs/{rate}gbps/report.html"' in text
        assert (out / "runs" / f"{rate}gbps" / "report.html").is_file()
    assert_every_plot_shown(found, out)


JOB_METRICS = {  # jobs.json metric -> (label, scale, format), as jobs.txt prints them
    "busbw_mean": ("busbw mean GB/s", 1e-9, "{:.2f}"),
    "busbw_cv": ("busbw CV", 1.0, "{:.3f}"),
    "fct_p50": ("FCT p50 us", 1e6, "{:.1f}"),
    "fct_p99": ("FCT p99 us", 1e6, "{:.1f}"),
    "job_time": ("job time ms", 1e3, "{:.3f}"),
}


def shown(value: Any, scale: float, fmt: str) -> list[str]:
    """A jobs.json estimate ({value, interval}) as the page's two cells."""
    point = "-" if value["value"] is None else fmt.format(value["value"] * scale)
    ci = value["interval"]
    if ci is None:
        return [point, "-"]
    low, high = ("-" if x is None else fmt.format(x * scale) for x in ci)
    return [point, f"[{low}, {high}]"]


def test_a_jobs_study_s_page_renders_and_links_each_run_s_page_with_its_jobs(
    tmp_path: Path,
) -> None:
    # two jobs sharing a leaf pair (tests/integration/test_several_jobs.py), together and each
    # alone, 2 repeats on the simulation: a few seconds
    scenario = tmp_path / "two.yaml"
    scenario.write_text(TWO.format(dense_steps=2, dense_passes=1, start_us=100))
    out = tmp_path / "two-jobs"
    done = emulate(
        "study", "jobs", str(scenario), "--backend", "sim", "--repeats", "2", "--out", str(out),
        "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    page = out / "report.html"
    assert f"report: {page}" in done.stdout.splitlines()
    doc = json.loads((out / "jobs.json").read_text())
    found = rendered(page, tmp_path / "study")

    assert found["title"] == "jobs study: report"
    assert found["images"] == [] and found["fetched"] == []  # the study has no plots of its own
    lines = lines_of(found)
    assert "Study: jobs" in lines
    assert fact(found, "scenario") == str(scenario) and fact(found, "repeats") == "2"
    assert fact(found, "jobs") == "dense, moe"
    for job in ("dense", "moe"):
        effects = [m["effect_of_the_others"] for m in doc["metrics"] if m["job"] == job]
        shown_in = f"shown in {effects.count('shown')} of {len(effects)} measures"
        assert f"{job}: effect of the other jobs: {shown_in}" in lines
    assert {(m["job"], m["collective"]) for m in doc["metrics"]} == {
        ("dense", "ALL_REDUCE"), ("dense", "job"), ("moe", "ALL_TO_ALL"), ("moe", "job"),
    }  # fmt: skip
    for m in doc["metrics"]:
        label, scale, fmt = JOB_METRICS[m["metric"]]
        ratio = shown(m["together_over_alone"], 1.0, "{:.3f}")
        if m.get("ratio_undefined"):  # the alone value at its floor: the difference instead
            point, interval = shown(m["together_minus_alone"], scale, fmt)
            ratio = [f"undefined; difference {point}", interval]
        assert row(found, m["job"], m["collective"], label)[3:] == [
            *shown(m["alone"], scale, fmt),
            *shown(m["together"], scale, fmt),
            *ratio,
            m["effect_of_the_others"],
        ]
    # every run, linked relatively to its own page, which is there
    text = page.read_text()
    assert len(doc["runs"]) == 6
    for run in doc["runs"]:
        name = f"{run['condition']}-seed{run['seed']}"
        assert row(found, run["condition"], str(run["seed"]))[2:] == [
            f"runs/{name}", "yes" if run["partial"] else "no", run["verdict"]
        ]  # fmt: skip
        assert f'href="runs/{name}/report.html"' in text
        assert (out / "runs" / name / "report.html").is_file()

    # a run of both jobs: its page has the Jobs section, every plot, the summary's numbers
    together = out / "runs" / "all-seed0"
    summary = json.loads((together / "summary.json").read_text())
    run = rendered(together / "report.html", tmp_path / "together")
    assert "Jobs" in lines_of(run)
    assert row(run, "dense", "0-1,4-5") == ["dense", "0-1,4-5", "1", "0"]
    assert row(run, "moe", "2-3,6-7") == ["moe", "2-3,6-7", "1", "100"]
    for name, job in summary["jobs"].items():
        for ctype, stats in job["collectives"].items():
            cells = row(run, name, ctype)
            assert cells[2:6] == [
                str(job["ranks"]),
                f"{job['job_time_s'] * 1e3:.3f}",
                str(stats["instances"]),
                f"{stats['busbw_mean_bytes_per_s'] / 1e9:.2f}",
            ]
            assert cells[9:11] == [
                f"{stats['fct_p50_s'] * 1e3:.3f}",
                f"{stats['fct_p99_s'] * 1e3:.3f}",
            ]
            assert cells[-1] == str(stats["ce_marks"])
    assert_every_plot_shown(run, together)
    # a job alone: one job, no Jobs section
    alone = rendered(out / "runs" / "moe-seed1" / "report.html", tmp_path / "alone")
    assert "Jobs" not in lines_of(alone)
    assert_every_plot_shown(alone, out / "runs" / "moe-seed1")
