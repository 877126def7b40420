"""Runs whose process died: found and marked failed, so they release their ingest slot.

`ctx ingest` and `ctx eval` execute their runs in their own process (`execute_in_process`). Killed there
(SIGKILL, OOM, a closed terminal's SIGHUP), such a run stays STARTED for ever: nothing else knows its
process, Dagster's run monitoring cannot check a worker the run launcher did not start, and with the
`ctx_ingest` pool at run granularity it holds a slot, so the sensor's next run has nothing to start on.

Each such run is tagged with its process (host, pid, and the process's start time, which a reused pid
does not share); the next `ctx ingest` or `ctx eval` and every tick of the `new_documents` sensor mark a
run whose process is gone as failed (`fail_dead_runs`). A run of another host is left to its own host's
next command: its process cannot be seen from here. Runs the daemon launches are the code server's: it fails a
run whose worker process exited (and run monitoring, in the shipped dagster.yaml, one that never started).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

HOST_TAG, PID_TAG, PROCESS_TAG = "ctx/host", "ctx/pid", "ctx/process"
# A process is "the same" when its pid, its start time (clock ticks since boot) and the boot agree.
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def process_fingerprint(pid: int) -> str | None:
    """`<boot id>:<start time>` of a live process, "" where /proc does not tell (not Linux), None when
    the process is gone or a zombie (killed, not yet reaped by its parent)."""
    stat = Path(f"/proc/{pid}/stat")
    if not Path("/proc").is_dir():
        return "" if _pid_exists(pid) else None
    try:
        # The command name (field 2) may hold spaces and parentheses: fields are counted after its ')'.
        fields = stat.read_text().rsplit(")", 1)[1].split()
        boot = _BOOT_ID.read_text().strip() if _BOOT_ID.exists() else ""
    except (OSError, IndexError):
        return None
    state, start_ticks = fields[0], fields[19]
    return None if state in ("Z", "X") else f"{boot}:{start_ticks}"


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def this_process_tags() -> dict[str, str]:
    """The tags that let a later command tell whether the run's process still lives."""
    pid = os.getpid()
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), PROCESS_TAG: process_fingerprint(pid) or ""}


@dataclass(frozen=True)
class RunProcess:
    host: str
    pid: int
    fingerprint: str

    @classmethod
    def of(cls, tags: dict[str, str]) -> RunProcess | None:
        try:
            return cls(tags[HOST_TAG], int(tags[PID_TAG]), tags.get(PROCESS_TAG, ""))
        except (KeyError, ValueError):
            return None

    def is_gone(self) -> bool:
        """True only when this host can see that the process no longer runs (never for another host)."""
        if self.host != socket.gethostname() or self.pid == os.getpid():
            return False
        now = process_fingerprint(self.pid)
        return now is None or (bool(self.fingerprint) and bool(now) and now != self.fingerprint)


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark failed every unfinished run of this host whose process is gone; their run ids."""
    records = instance.get_run_records(filters=dg.RunsFilter(
        statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED],
        tags={HOST_TAG: socket.gethostname()}))
    failed = []
    for record in records:
        run = record.dagster_run
        process = RunProcess.of(dict(run.tags))
        if process is None or not process.is_gone():
            continue
        instance.report_run_failed(run, f"the process that ran it (pid {process.pid} on {process.host}) is gone "
                                        "(killed or crashed); marked failed so it releases its ingest slot. Run "
                                        "`ctx ingest` again for its documents (the sensor retries its own)")
        failed.append(run.run_id)
    return failed
