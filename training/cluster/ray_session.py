"""The Ray session of a run: joined or started by ``connect``, and recorded so that the next run can clean up
after a killed driver.

``connect(address, record)`` uses an initialised Ray session, else joins ``address``, else starts a local one
(``RAY_ENV``: quiet, offline, no token auth); a local session it started is written to ``record`` and ended by
``RaySession.close``.  ``RayBackend`` connects with the run directory's record: the session name, the
raylet's pid and the driver's pid.  When the next run starts and that driver is dead, ``clean_stale_session``
SIGKILLs the session's leftover processes (found
under ``/proc`` by the session name: Linux only).  ``docs/faults.md`` says what a user does otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

logger = logging.getLogger(__name__)

#: Environment for a Ray session this project starts (quiet, offline, no token auth).
RAY_ENV: dict[str, str] = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def session_processes(session_name: str, raylet_pid: Optional[int] = None) -> list[int]:
    """Pids of this machine's processes of the Ray session ``session_name`` (this process excluded):
    those whose command line names it (GCS, raylet, monitors) and, given ``raylet_pid``, the ``ray::``
    processes started by that raylet (agents, workers: their command line is rewritten, their
    environment keeps ``RAY_RAYLET_PID``)."""
    marker = f"RAY_RAYLET_PID={raylet_pid}\0".encode() if raylet_pid else None
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        if int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if session_name.encode() in cmdline:
                pids.append(int(entry.name))
            elif marker and cmdline.startswith(b"ray::") and marker in (entry / "environ").read_bytes() + b"\0":
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def kill_session_processes(session_name: str, raylet_pid: Optional[int] = None) -> list[int]:
    """SIGKILL every process of the Ray session (``session_processes``); return their pids."""
    pids = session_processes(session_name, raylet_pid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return pids


def clean_stale_session(record: Path) -> list[int]:
    """If ``record`` names a Ray session whose driver is dead, kill what is left of it and remove the
    record; return the pids killed (empty when there was nothing stale)."""
    try:
        info = json.loads(Path(record).read_text())
        driver, session = int(info["driver_pid"]), str(info["session_name"])
        raylet = int(info["raylet_pid"]) if info.get("raylet_pid") else None
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if driver != os.getpid() and _alive(driver):
        logger.warning("Ray session %s recorded in %s still has its driver (pid %d) running; leaving it",
                       session, record, driver)
        return []
    killed = kill_session_processes(session, raylet)
    if killed:
        logger.warning("killed %d leftover processes of Ray session %s (its driver, pid %d, is gone)",
                       len(killed), session, driver)
    Path(record).unlink(missing_ok=True)
    return killed


def session_ids() -> tuple[Optional[str], Optional[int]]:
    """The name of the local Ray session this process started and its raylet's pid (None if unknown)."""
    try:
        from ray._private import ray_constants
        from ray._private import worker as ray_worker

        node = ray_worker._global_node
        raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
        return node.session_name, (raylets[0].process.pid if raylets else None)
    except Exception:  # a private API: without it there is simply no cleanup record
        return None, None


@dataclass
class RaySession:
    """This process's connection to Ray.  ``owned``: this process initialised Ray (``close`` shuts it down);
    ``name`` and ``raylet_pid``: a local session it started (``close`` kills what ``ray.shutdown`` leaves)."""

    owned: bool
    name: Optional[str] = None
    raylet_pid: Optional[int] = None
    record: Optional[Path] = None

    def close(self) -> None:
        """Shut Ray down if this process started it, kill the local session's leftovers, drop the record."""
        import ray

        if self.owned and ray.is_initialized():
            ray.shutdown()
        if self.name:
            left = kill_session_processes(self.name, self.raylet_pid)
            if left:
                logger.info("killed %d Ray processes left after shutdown", len(left))
            if self.record is not None:
                self.record.unlink(missing_ok=True)
            self.name = None


def connect(address: Optional[str] = None, record: Optional[Path] = None) -> RaySession:
    """The Ray session to use: the initialised one, else the cluster at ``address``, else a new local one.
    With ``record`` (a file in the run directory), a stale session recorded there is cleaned up first and a new
    local session is recorded."""
    import ray

    if ray.is_initialized():
        return RaySession(owned=False)
    for key, value in RAY_ENV.items():
        os.environ.setdefault(key, value)
    record = Path(record) if record is not None else None
    if record is not None:
        clean_stale_session(record)
    ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    session = RaySession(owned=True, record=record)
    if address is None:  # a local session this process started (and must not outlive it)
        session.name, session.raylet_pid = session_ids()
        if record is not None and session.name:
            record.write_text(json.dumps({"driver_pid": os.getpid(), "session_name": session.name,
                                          "raylet_pid": session.raylet_pid}) + "\n")
    return session
