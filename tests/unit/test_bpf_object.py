"""BPF objects: compiled once per source digest and variant, one-line errors."""

from __future__ import annotations

import shutil

import pytest

from emulator.errors import EnvironmentProblem
from emulator.native import bpf_object

PROGRAM = """
#include <linux/bpf.h>
__attribute__((section("xdp"), used)) int pass(struct xdp_md *ctx) { return XDP_PASS; }
char _license[] __attribute__((section("license"), used)) = "GPL";
"""

needs_clang = pytest.mark.skipif(shutil.which("clang") is None, reason="clang is missing")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "chakra-emulator" / "bpf"


def test_missing_clang_names_the_program(tmp_path, cache, monkeypatch):
    source = tmp_path / "p.bpf.c"
    source.write_text(PROGRAM)
    monkeypatch.setattr(bpf_object.shutil, "which", lambda name: None)
    with pytest.raises(EnvironmentProblem, match=r"^the test program needs clang \(Debian"):
        bpf_object.compiled(source, "p", what="the test program")
    assert not cache.exists() or not any(cache.iterdir())


@needs_clang
def test_compiled_once_per_digest_and_variant(tmp_path, cache):
    source = tmp_path / "p.bpf.c"
    source.write_text(PROGRAM)
    first = bpf_object.compiled(source, "p", what="the test program")
    assert first.parent == cache and first.read_bytes()[:4] == b"\x7fELF"
    stamp = first.stat().st_mtime_ns
    assert bpf_object.compiled(source, "p", what="the test program") == first
    assert first.stat().st_mtime_ns == stamp  # the cache, not a second compile
    variant = bpf_object.compiled(source, "p-x", what="the test program", defines=["X"])
    assert variant != first
    source.write_text(PROGRAM + "\n/* changed */\n")
    assert bpf_object.compiled(source, "p", what="the test program") != first
    assert not list(cache.glob("*.tmp"))


@needs_clang
def test_a_compile_error_is_one_line_and_leaves_nothing(tmp_path, cache):
    source = tmp_path / "bad.bpf.c"
    source.write_text("this is not C;\n")
    with pytest.raises(EnvironmentProblem) as err:
        bpf_object.compiled(source, "bad", what="the test program")
    assert str(err.value).startswith("compiling bad.bpf.c (the test program) failed: ")
    assert "\n" not in str(err.value)
    assert not list(cache.glob("*"))


def test_a_compile_that_hangs_is_one_line(tmp_path, cache, monkeypatch):
    source = tmp_path / "p.bpf.c"
    source.write_text(PROGRAM)

    def hang(argv, **kwargs):
        raise bpf_object.subprocess.TimeoutExpired(argv, kwargs["timeout"])

    monkeypatch.setattr(bpf_object.shutil, "which", lambda name: "/usr/bin/clang")
    monkeypatch.setattr(bpf_object.subprocess, "run", hang)
    with pytest.raises(EnvironmentProblem, match=r"^compiling p\.bpf\.c \(the test program\) took"):
        bpf_object.compiled(source, "p", what="the test program")
    assert not list(cache.glob("*"))
