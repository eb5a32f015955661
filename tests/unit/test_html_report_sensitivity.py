"""report.html of a sensitivity study: written by the study after its json and txt, the tables
with the numbers and columns of sensitivity.txt, a verdict per collective type and the job, the
figure embedded, each rate's run linked (its page where it has one), user text escaped; a page
that cannot be written is a warning and the study stands."""

from __future__ import annotations

import base64
import json
import re
import stat
from pathlib import Path

import pytest

from emulator.errors import InputError
from emulator.studies.sensitivity import study as sens
from emulator.studies.sensitivity.analysis import RateRun, TypeTimes
from emulator.studies.sensitivity.page import render_sensitivity_report, write_sensitivity_report
from tests.unit.test_html_report import EVIL, Page

US = 1e-6
RATES = (400.0, 200.0, 100.0)


def rate_runs(out: Path) -> list[RateRun]:
    """All-to-All bandwidth-bound (2 x 100 us at 400 Gb/s, x rate ratio), All-Reduce
    latency-bound (2 x (20 + 0.5 k) us), a Broadcast only at the reference, the job partly
    bound (1 -> 1.9 -> 3.5 ms); the 200 Gb/s run emulated and degraded. Each run a folder under
    out/runs, with its own page at 400 and 100 Gb/s only."""
    runs = []
    for rate in RATES:
        k = RATES[0] / rate
        folder = sens.run_folder(out, rate)
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text("{}")
        if rate != 200:
            (folder / "report.html").write_text("")
        times = {
            "ALL_TO_ALL": TypeTimes(2, 200 * US * k, 190 * US * k),
            "ALL_REDUCE": TypeTimes(2, 2 * (20 + 0.5 * k) * US, 1 * US * k),
        }
        if rate == RATES[0]:
            times["BROADCAST"] = TypeTimes(1, 5 * US, 4 * US)
        job_s = {400.0: 1e-3, 200.0: 1.9e-3, 100.0: 3.5e-3}[rate]
        emulated = rate == 200
        runs.append(
            RateRun(
                rate,
                rate,
                folder,
                times,
                job_s,
                0.8e-3 * k,
                "degraded" if emulated else "ok",
                False,
                1000.0 if emulated else 1.0,
                "netns" if emulated else "sim",
            )
        )
    return runs


@pytest.fixture
def study(tmp_path: Path) -> tuple[Path, sens.SensitivityResult]:
    out = tmp_path / "study"
    # the degraded 200 Gb/s run judged too (left out by default: test_study_flagged_runs.py)
    runs = rate_runs(out)
    return out, sens.write_study(runs, out, Path("scenarios/small.yaml"), include_flagged=True)


def text_rows(text: str, name: str) -> list[list[str]]:
    """The txt's table lines for `name` (its time row, then its mean instance row)."""
    return [line.split() for line in text.splitlines() if line.startswith(f"{name} ")]


def test_the_study_writes_its_page_with_the_txt_s_numbers(
    study: tuple[Path, sens.SensitivityResult],
) -> None:
    out, result = study
    assert result.report == out / "report.html"
    assert stat.S_IMODE(result.report.stat().st_mode) == 0o600
    text = result.report.read_text()
    assert "<script" not in text.lower() and "http" not in text
    page = Page(text)
    assert page.errors == [] and page.stack == []
    words = "".join(page.text)
    assert "Study: sensitivity" in words
    assert "scenarioscenarios/small.yaml" in words  # the facts: term, then value
    assert "link rates400, 200, 100 Gb/s" in words and "reference400 Gb/s" in words
    # the time table, by hand: total ms at each rate, slowdown, plan, rate ratio
    a2a = page.row("ALL_TO_ALL", "bandwidth-bound")[2:]
    assert a2a[:4] == ["0.200", "0.400", "2.00x", "2.00x"] and a2a[4:] == (
        ["2.00x", "0.800", "4.00x", "4.00x", "4.00x"]
    )
    assert page.row("ALL_REDUCE", "latency/compute-bound")[3:5] == ["0.042", "1.02x"]  # 42/41
    # measured at the reference only: "-" elsewhere, the rate ratio still shown
    assert page.row("BROADCAST", "not measured")[2:] == (
        ["0.005", "-", "-", "-", "2.00x", "-", "-", "-", "4.00x"]
    )
    assert page.row("job", "partly bandwidth-bound")[3:11] == (
        ["1.900", "1.90x", "2.00x", "2.00x", "3.500", "3.50x", "4.00x", "4.00x"]
    )
    assert page.row("ALL_TO_ALL", "2 / 2 / 2") == (
        ["ALL_TO_ALL", "2 / 2 / 2", "100.00", "200.00", "400.00", "2.00x", "4.00x"]
    )
    assert page.row("BROADCAST", "1 / - / -")[2:] == ["5.00", "-", "-", "-", "-"]
    # every cell of both tables is the txt's (emulator.studies.sensitivity.text.render_text)
    for name, verdict in [
        ("ALL_REDUCE", "latency/compute-bound"),
        ("ALL_TO_ALL", "bandwidth-bound"),
        ("BROADCAST", "not measured"),
        ("job", "partly bandwidth-bound"),
    ]:
        times, *means = text_rows(result.text, name)
        assert " ".join(page.row(name, verdict)).split() == times
        for mean in means:
            assert mean in [" ".join(row).split() for row in page.rows]
    assert (out / "sensitivity.txt").read_text() == result.text + "\n"


def test_the_page_has_the_verdicts_the_figure_the_runs_and_the_files(
    study: tuple[Path, sens.SensitivityResult],
) -> None:
    out, result = study
    page = Page((out / "report.html").read_text())
    words = "".join(page.text)
    for row in (*result.rows, result.job):
        assert f"{row.name}: {row.verdict}" in words and row.detail in words
    assert "4.00x at 100 Gb/s against 4x bandwidth-bound" in words
    assert "bandwidth_bound_min_share0.85" in words  # the tolerance
    (src,) = page.srcs
    assert src.startswith("data:image/png;base64,")
    assert (
        base64.b64decode(src.split(",", 1)[1]) == (out / "plots" / "sensitivity.png").read_bytes()
    )
    # each rate's run, relative: its page where it has one, else its folder
    assert page.hrefs[:3] == [
        "runs/400gbps/report.html",
        "runs/200gbps/",
        "runs/100gbps/report.html",
    ]
    assert page.row("runs/200gbps") == (
        ["runs/200gbps", "200 / 200", "netns", "1000", "1.900", "1.600", "no", "degraded"]
    )
    assert page.row("runs/400gbps")[2:4] == ["sim", "-"]  # a simulation has no TDF
    assert any("fidelity degraded" in line for line in result.notes)
    assert all(note in words for note in result.notes)
    assert page.hrefs[3:] == ["sensitivity.json", "sensitivity.txt"]
    assert f"sensitivity study: {out}" in words  # the txt, folded in


def test_reused_runs_elsewhere_and_user_text(study: tuple[Path, sens.SensitivityResult]) -> None:
    out, _ = study
    doc = json.loads((out / "sensitivity.json").read_text())
    doc["scenario"] = None
    doc["runs"][0]["folder"] = f"/elsewhere/{EVIL}"
    doc["collectives"]["ALL_TO_ALL"]["detail"] = f"detail {EVIL}"
    doc["notes"] = [f"note {EVIL}"]
    (out / "sensitivity.json").write_text(json.dumps(doc))
    text = render_sensitivity_report(out)
    assert "<script" not in text.lower() and "&lt;script&gt;" in text
    page = Page(text)
    words = "".join(page.text)
    assert "scenarioreused runs" in words
    assert f"detail {EVIL}" in words and f"note {EVIL}" in words
    assert page.row(f"/elsewhere/{EVIL}")[1] == "400 / 400"  # outside: named, not linked
    assert not any("elsewhere" in h for h in page.hrefs)


def test_a_page_that_cannot_be_written_is_a_warning_and_the_study_stands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    runs = rate_runs(out)
    (out / "report.html").mkdir()  # cannot be replaced by a file
    result = sens.write_study(runs, out, None)
    assert result.report is None
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {out / 'report.html'}: not written (IsADirectoryError")
    assert json.loads((out / "sensitivity.json").read_text())["reference_gbps"] == 400
    assert (out / "sensitivity.txt").is_file() and (out / "plots" / "sensitivity.png").is_file()


def test_missing_or_bad_json_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=re.escape(str(tmp_path / "sensitivity.json"))):
        write_sensitivity_report(tmp_path)
    (tmp_path / "sensitivity.json").write_text("[]")
    with pytest.raises(InputError, match="expected a JSON object"):
        render_sensitivity_report(tmp_path)
    assert not (tmp_path / "report.html").exists()
