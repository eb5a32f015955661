"""report.html of a results folder, a study and a series of seeds: every plot embedded once, the
verdicts and numbers as the JSON says, user text escaped, nothing fetched from elsewhere."""

from __future__ import annotations

import base64
import json
import re
import stat
import struct
import zlib
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from collectors.pages.kit import write_or_warn
from collectors.pages.run import render_run_report, write_run_report
from collectors.report import summary_table
from emulator.errors import InputError
from emulator.studies.interference.page import render_study_report, write_study_report
from emulator.studies.seeds.page import render_seeds_report, write_seeds_report

EVIL = "<script>alert(1)</script>"
VOID = {"meta", "img", "br", "hr", "link", "input", "source", "wbr", "col", "area", "base"}
STRUCTURAL = {"html", "head", "body", "main", "section", "article", "table", "thead", "tbody"}
STRUCTURAL |= {"tr", "td", "th", "ul", "li", "dl", "dt", "dd", "figure", "details", "div", "p"}


def tiny_png(rgb: tuple[int, int, int]) -> bytes:
    """A valid 1x1 PNG of one colour (so two plots differ in their bytes)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(bytes([0, *rgb]))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


class Page(HTMLParser):
    """The parsed page: tag balance of the structural tags, table rows, img srcs, hrefs."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.rows: list[list[str]] = []
        self.srcs: list[str] = []
        self.alts: list[str] = []
        self.hrefs: list[str] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "img":
            self.srcs.append(found.get("src") or "")
            self.alts.append(found.get("alt") or "")
        if tag == "a":
            self.hrefs.append(found.get("href") or "")
        if tag == "tr":
            self.rows.append([])
        if tag in ("td", "th"):
            self._cell = []
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None
        if tag in STRUCTURAL and (not self.stack or self.stack[-1] != tag):
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def row(self, *first: str) -> list[str]:
        """The one table row whose first cells are `first`."""
        (found,) = [r for r in self.rows if tuple(r[: len(first)]) == first]
        return found


def summary(**extra: Any) -> dict[str, Any]:
    """A summary.json as the simulator writes it (numbers from a real 16-host run)."""
    return {
        "scenario": "moe_mix",
        "tdf": 1.0,
        "marker": "simulated",
        "fabric": "Clos: 2 leaves x 8 hosts",
        "backend": "sim",
        "time": "simulated",
        "fidelity": {"verdict": "ok", "reasons": [], "unknown": [], "leaves_out": ["no CPU"]},
        "job_time_s": 0.05884908308449786,
        "ideal_job_time_s": 0.04797172838086491,
        "seed": 7,
        "world_size": 16,
        "iterations": 10,
        "partial": False,
        "collectives": {
            "ALL_REDUCE": {
                "instances": 80,
                "busbw_mean_bytes_per_s": 14722653585.646305,
                "busbw_p5_bytes_per_s": 11638326722.607521,
                "busbw_cv": 0.1261624035703376,
                "ideal_busbw_bytes_per_s": 15809902982.201834,
                "fct_p50_s": 0.00020237588000592,
                "fct_p99_s": 0.000391787895394298,
                "fct_max_s": 0.0005907373600001254,
                "cnps": 7650,
                "ce_marks": 14481,
            }
        },
        **extra,
    }


def run_folder(tmp_path: Path, **extra: Any) -> Path:
    folder = tmp_path / "run"
    (folder / "plots").mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps(summary(**extra)))
    (folder / "flows.parquet").write_bytes(b"PAR1")
    (folder / "scenario.yaml").write_text("name: moe_mix\n")
    (folder / "plots" / "fct_cdf.png").write_bytes(tiny_png((255, 0, 0)))
    (folder / "plots" / "busbw_per_iteration.png").write_bytes(tiny_png((0, 0, 255)))
    return folder


REFERENCE = {
    "backend": "sim",
    "folder": "/tmp/ref",
    "bounds": {"busbw_mean_ratio": 0.1, "ks_distance": 0.25, "busbw_cv_abs": 0.1},
    "by_collective": {
        "ALL_REDUCE": {
            "busbw_mean_gbps": [2.4662160780973736, 2.967768786695706],
            "busbw_cv": [0.134, 0.140],
            "busbw_mean_ratio": 0.8310000729009763,
            "fct_ks_distance": 0.34375,
            "cnps": [477, 173],
            "ecn_marks": [1382, 221],
            "deviations": ["busbw mean 2.47 GB/s vs reference 2.97 GB/s: ratio 0.831"],
        }
    },
    "deviations": ["ALL_REDUCE: busbw mean 2.47 GB/s vs reference 2.97 GB/s: ratio 0.831"],
    "not_measured": [],
}


def test_every_plot_is_embedded_once_and_decodes_to_the_file(tmp_path: Path) -> None:
    folder = run_folder(tmp_path)
    page = Page(render_run_report(folder))
    pngs = sorted((folder / "plots").glob("*.png"))
    assert len(page.srcs) == len(pngs) == 2
    for src, png in zip(page.srcs, pngs, strict=True):  # in sorted order
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == png.read_bytes()
    assert page.alts == ["busbw per iteration", "fct cdf"]
    assert "fct_cdf.png" in "".join(page.text)


def test_verdict_reasons_and_user_text_are_escaped(tmp_path: Path) -> None:
    fidelity = {"verdict": "degraded", "reasons": [f"late ticks {EVIL}", "CPU & queue"]}
    folder = run_folder(tmp_path, scenario=f"s{EVIL}", fidelity=fidelity)
    text = render_run_report(folder)
    assert "<script" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "CPU &amp; queue" in text
    page = Page(text)
    words = "".join(page.text)
    assert "Fidelity: degraded" in words
    assert f"late ticks {EVIL}" in words and f"Run report: s{EVIL}" in words


def test_headline_leaves_out_and_timescale(tmp_path: Path) -> None:
    words = "".join(Page(render_run_report(run_folder(tmp_path))).text)
    assert "Fidelity: ok" in words and "no CPU" in words  # leaves_out listed
    for fact in ("job time0.058849 s", "ideal job time0.047972 s", "seed7", "world size16"):
        assert fact in words
    assert "simulated time" in words
    dilated = summary(backend="netns", time=None, tdf=1000.0, time_dilation={"how": "probe"})
    (tmp_path / "run" / "summary.json").write_text(json.dumps(dilated))
    assert "time dilated by TDF 1000 (probe)" in render_run_report(tmp_path / "run")


def test_page_is_self_contained(tmp_path: Path) -> None:
    text = render_run_report(run_folder(tmp_path, reference=REFERENCE))
    assert text.startswith("<!doctype html>") and '<meta charset="utf-8">' in text
    assert "http://" not in text and "https://" not in text
    assert "<link" not in text and "url(" not in text and "@import" not in text
    srcs = re.findall(r'src="([^"]*)"', text)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert text.count('src="') == len(srcs)


def test_collective_table_has_the_terminal_numbers(tmp_path: Path) -> None:
    page = Page(render_run_report(run_folder(tmp_path)))
    row = page.row("ALL_REDUCE")
    assert row[:3] == ["ALL_REDUCE", "80", "14.72"]  # 14722653585.6 bytes/s in GB/s
    assert row[6] == "0.202" and row[-2:] == ["7650", "14481"]  # FCT p50 ms; CNPs, ECN marks
    (terminal,) = [line for line in summary_table(summary()).splitlines() if "ALL_REDUCE" in line]
    assert row[:-1] == terminal.split()  # every column the terminal prints, the same
    assert page.row("collective")[-1] == "ECN marks"


def test_reference_section_only_when_present(tmp_path: Path) -> None:
    plain = Page(render_run_report(run_folder(tmp_path)))
    assert "Reference comparison" not in plain.text
    folder = tmp_path / "with"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary(reference=REFERENCE)))
    page = Page(render_run_report(folder))
    assert "Reference comparison" in page.text
    rows = [r for r in page.rows if r[0] == "ALL_REDUCE"]
    assert rows[1][:11] == [
        "ALL_REDUCE",
        "2.47",
        "2.97",
        "0.831",
        "0.134",
        "0.140",
        "0.344",
        "477",
        "173",
        "1382",
        "221",
    ]
    assert "ratio 0.831" in rows[1][11]
    assert "deviates." in page.text


def test_expectations_pfc_and_files(tmp_path: Path) -> None:
    expectations = [
        {"expectation": "no loss", "status": "PASS", "detail": "0 lost"},
        {"expectation": "ce seen", "status": "FAIL", "detail": "no CE"},
    ]
    pfc: dict[str, Any] = {
        "enabled": True,
        "pause_frames": 3,
        "paused_s": 2.5e-6,
        "headroom_drops": 0,
    }
    pfc["ports"] = [{"switch": "leaf0", "port": "eth1", "pause_frames": 3, "paused_s": 2.5e-6}]
    folder = run_folder(tmp_path, expectations=expectations, pfc=pfc)
    written = write_run_report(folder)
    assert written == folder / "report.html"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    page = Page(written.read_text())
    assert page.row("FAIL") == ["FAIL", "ce seen", "no CE"]
    assert "1 passed, 1 failed, 0 not applicable" in page.text
    assert page.row("leaf0") == ["leaf0", "eth1", "3", "2.5"]
    assert page.hrefs == ["flows.parquet", "scenario.yaml", "summary.json"]
    no_pfc = Page(render_run_report(run_folder(tmp_path / "b")))
    assert "PFC" not in no_pfc.text and "Expectations" not in no_pfc.text


def test_a_page_rewritten_replaces_the_old_one_atomically(tmp_path: Path) -> None:
    folder = run_folder(tmp_path)
    (folder / "report.html").write_text("old page")
    written = write_run_report(folder)
    assert "Run report: moe_mix" in written.read_text()
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    # nothing left beside it (the page is written to a hidden file, then renamed over)
    assert sorted(p.name for p in folder.iterdir()) == [
        "flows.parquet",
        "plots",
        "report.html",
        "scenario.yaml",
        "summary.json",
    ]


def test_write_or_warn_says_why_a_page_is_missing_and_raises_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = run_folder(tmp_path)
    said: list[str] = []
    assert write_or_warn(write_run_report, folder, said.append) == folder / "report.html"
    assert said == []
    (folder / "report.html").unlink()
    (folder / "report.html").mkdir()  # cannot be replaced by a file: an OSError
    again = f"emulate report {folder}"
    assert write_or_warn(write_run_report, folder, said.append, again=again) is None
    (line,) = said
    assert line.startswith(f"warning: {folder / 'report.html'}: not written (IsADirectoryError")
    assert line.endswith(
        f"the other results files are complete without it; `{again}` writes it again"
    )
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no temporary left
    # a renderer's failure too (an unreadable summary.json): said on stderr by default
    (folder / "summary.json").write_text("[]")
    assert write_or_warn(write_run_report, folder) is None
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {folder / 'report.html'}: not written (InputError: ")
    assert "expected a JSON object" in err and err.count("\n") == 1


def test_write_or_warn_lets_an_interrupt_through(tmp_path: Path) -> None:
    def interrupted(_folder: Path) -> Path:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_or_warn(interrupted, tmp_path, lambda _line: None)


def study_folder(tmp_path: Path) -> Path:
    out = tmp_path / "study"
    inside = out / "runs" / "mixed-seed0"
    inside.mkdir(parents=True)
    (inside / "report.html").write_text("")
    (out / "plots").mkdir()
    (out / "plots" / "compare_cnps.png").write_bytes(tiny_png((0, 255, 0)))
    checks = [
        {
            "name": "allreduce_busbw_cv",
            "question": "Does the All-Reduce busbw vary more when mixed?",
            "expected": "higher CV mixed",
            "verdict": "not shown",
            "alone": 0.28233161056819917,
            "mixed": 0.276137329595663,
            "ratio": 0.9780602640984124,
            "threshold": 1.25,
            "detail": f"mixed/alone CV 0.978 [0.664, 2.27] (95% CI): below 1.25 {EVIL}",
            "numbers": {"repeats_alone": 2, "busbw_mean_alone_bytes_per_s": 14656978069.47},
            "alone_ci": [0.12530815602158468, 0.39444895725097257],
            "mixed_ci": [0.2419674220904171, 0.30234047096592015],
            "ratio_ci": [0.6643694588608264, 2.268714577164539],
            "shown": False,
        },
        {
            "name": "allreduce_alone_line_rate",
            "question": "Does the All-Reduce alone run near line rate?",
            "expected": "busbw / ideal >= 0.8",
            "verdict": "not measurable",
            "alone": None,
            "mixed": None,
            "ratio": None,
            "threshold": 0.8,
            "detail": "fewer than 2 instances in the alone runs (1)",
            "numbers": {},
            "alone_ci": None,
            "mixed_ci": None,
            "ratio_ci": None,
            "shown": False,
        },
    ]
    fidelity = {"verdict": "degraded", "reasons": ["late"]}
    runs = {
        "allreduce_only": [
            {
                "repeat": 1,
                "seed": 0,
                "folder": "/elsewhere/ar",
                "tdf": 12000.0,
                "fidelity": fidelity,
            }
        ],
        "mixed": [
            {
                "repeat": 1,
                "seed": 0,
                "folder": str(inside),
                "tdf": 13000.0,
                "fidelity": {"verdict": "ok"},
            }
        ],
    }
    study = {
        "study": "interference",
        "runs": runs,
        "checks": checks,
        "all_shown": False,
        "notes": [f"mixed repeat 1: {EVIL}"],
        "thresholds": {"cv_ratio_min": 1.25, "repeats_min": 2},
        "bootstrap": {"method": "two-level", "resamples": 2000, "confidence": 0.95, "seed": 0},
    }
    (out / "study.json").write_text(json.dumps(study))
    (out / "study.txt").write_text(f"interference study {EVIL}\n")
    return out


def test_study_report(tmp_path: Path) -> None:
    out = study_folder(tmp_path)
    written = write_study_report(out)
    text = written.read_text()
    assert "<script" not in text.lower() and stat.S_IMODE(written.stat().st_mode) == 0o600
    page = Page(text)
    words = "".join(page.text)
    assert "Checks: 0 of 2 shown" in words
    assert "Does the All-Reduce busbw vary more when mixed?" in words and "higher CV mixed" in words
    assert page.row("alone", "0.282") == ["alone", "0.282", "[0.125, 0.394]"]
    assert page.row("alone", "-") == ["alone", "-", "-"]  # the not measurable check
    assert page.row("mixed/alone") == ["mixed/alone", "0.978", "[0.664, 2.27]"]
    assert page.row("ratio") == ["ratio", "-", "-"]  # the not measurable check
    assert "not measurable" in page.text and "not shown" in page.text
    assert f"below 1.25 {EVIL}" in words and f"mixed repeat 1: {EVIL}" in words
    assert page.row("mixed", "1")[:3] == ["mixed", "1", "runs/mixed-seed0"]
    assert page.row("allreduce_only")[2:] == ["/elsewhere/ar", "0", "12000", "no", "degraded"]
    assert "runs/mixed-seed0/report.html" in page.hrefs  # inside: linked; outside: text only
    assert not any("elsewhere" in h for h in page.hrefs)
    assert page.hrefs[-2:] == ["study.json", "study.txt"]
    assert f"interference study {EVIL}" in words  # study.txt, escaped
    assert base64.b64decode(page.srcs[0].split(",", 1)[1]) == tiny_png((0, 255, 0))


def test_seeds_report(tmp_path: Path) -> None:
    out = tmp_path / "seeds"
    for seed in (0, 1):
        (out / f"seed-{seed}").mkdir(parents=True)
        (out / f"seed-{seed}" / "summary.json").write_text("{}")
    (out / "seed-0" / "report.html").write_text("")  # seed 1's page not written: its folder
    estimates = {
        "ALL_REDUCE": {
            "busbw_mean_bytes_per_s": {
                "point": 14865355800.566679,
                "ci": [13173211002.782722, 16679802757.056492],
                "seeds": 2,
                "units": 160,
            },
            "fct_p99_s": {"point": 0.00048346472065907004, "ci": None, "seeds": 1, "units": 1},
        },
        "run": {"job_time_s": {"point": 0.059191498784366914, "ci": None, "seeds": 2, "units": 2}},
    }
    runs = [
        {"seed": s, "folder": f"/moved/away/seed-{s}", "partial": False, "fidelity": "ok"}
        for s in (0, 1)
    ]
    doc = {"seeds": [0, 1], "runs": runs, "backend": "sim", "estimates": estimates}
    doc["bootstrap"] = {"method": "two-level", "resamples": 2000, "confidence": 0.95, "seed": 0}
    (out / "seeds.json").write_text(json.dumps(doc))
    written = write_seeds_report(out)
    page = Page(written.read_text())
    assert page.row("ALL_REDUCE", "busbw_mean_bytes_per_s") == [
        "ALL_REDUCE",
        "busbw_mean_bytes_per_s",
        "14.87",
        "[13.17, 16.68]",
        "GB/s",
        "2",
        "160",
    ]
    assert page.row("per run")[1:5] == ["job_time_s", "59.19", "-", "ms"]
    # Linked where they are now (the recorded folders moved with the series).
    assert [h for h in page.hrefs if "seed-" in h] == ["seed-0/report.html", "seed-1/"]
    assert "95% interval" in page.row("of")


@pytest.mark.parametrize(
    ("render", "name"),
    [
        (render_run_report, "summary.json"),
        (render_study_report, "study.json"),
        (render_seeds_report, "seeds.json"),
    ],
)
def test_missing_or_bad_json_is_an_input_error(
    tmp_path: Path, render: Callable[[Path], str], name: str
) -> None:
    with pytest.raises(InputError, match=re.escape(str(tmp_path / name))):
        render(tmp_path)
    (tmp_path / name).write_text("[1, 2]")
    with pytest.raises(InputError, match="expected a JSON object"):
        render(tmp_path)


def test_structural_tags_balance(tmp_path: Path) -> None:
    pages = [
        render_run_report(run_folder(tmp_path, reference=REFERENCE, pfc={"enabled": False})),
        render_study_report(study_folder(tmp_path)),
    ]
    for text in pages:
        page = Page(text)
        assert page.errors == []
        assert page.stack == []
