"""bench.sim.deployment finds dagster-webserver / dagster-daemon next to the running interpreter,
else on PATH, else fails with one line naming the executable and where it looked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.sim.deployment import DeploymentError, find_executable


def make_executable(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / name
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe


def test_next_to_the_interpreter_wins_over_path(tmp_path):
    beside = make_executable(tmp_path / "venv" / "bin", "dagster-webserver")
    on_path = make_executable(tmp_path / "elsewhere", "dagster-webserver")
    assert find_executable("dagster-webserver", bin_dir=beside.parent, path=str(on_path.parent)) == beside


def test_falls_back_to_path(tmp_path):
    on_path = make_executable(tmp_path / "elsewhere", "dagster-daemon")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "dagster-daemon").write_text("not executable")  # skipped: no x bit
    found = find_executable("dagster-daemon", bin_dir=tmp_path / "venv" / "bin",
                            path=f"{tmp_path / 'missing'}:{on_path.parent}")
    assert found == on_path


def test_neither_is_one_clear_line(tmp_path):
    with pytest.raises(DeploymentError) as err:
        find_executable("dagster-daemon", bin_dir=tmp_path / "bin", path=str(tmp_path / "nowhere"))
    message = str(err.value)
    assert "\n" not in message
    assert "dagster-daemon" in message and str(tmp_path / "bin") in message and str(tmp_path / "nowhere") in message


def test_default_is_this_interpreters_environment():
    # This venv has dagster installed: its executables sit next to sys.executable.
    assert find_executable("dagster-webserver") == Path(sys.executable).parent / "dagster-webserver"
