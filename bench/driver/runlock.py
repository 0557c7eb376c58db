"""One sweep per run folder: an exclusive ``flock`` on ``<run>/.sweep.lock`` for the sweep's life.

Two sweeps on one folder would append to the same parts files, overwrite each other's run id
and meta, and time while competing for the cores. The lock file stays after the run (it is
empty but for who holds it): unlinking a lock file races with a process about to lock it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path

from bench.errors import BadInput

LOCK_FILE = ".sweep.lock"

#: errors that say the filesystem cannot lock at all (Lustre without -o flock, some FUSE mounts)
NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class RunLock:
    """Held from ``acquire`` until ``release`` (or the process ends: the kernel drops it then)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / LOCK_FILE
        self.created_folder = False
        self.created_file = False
        self.unsupported: str | None = None  # why the folder could not be locked, if it could not
        self._fd: int | None = None

    def acquire(self, where: str) -> None:
        """Lock, or BadInput (exit 2) naming the folder and who holds it."""
        folder = self.path.parent
        try:
            self.created_folder = not folder.exists()
            folder.mkdir(parents=True, exist_ok=True)
            self.created_file = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise BadInput(where, f"cannot write results to {folder}: {error.strerror or error}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno in NO_LOCKS:
                self.unsupported = error.strerror or str(error)
                self._fd = fd
                return
            holder = _read_holder(fd)
            os.close(fd)
            raise BadInput(where, f"{folder} is in use by another sweep ({holder}); wait for it to end, "
                           "or pass another --out") from None
        self._fd = fd
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%H:%M:%S')}\n".encode())

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def abandon(self) -> None:
        """Release and take back what ``acquire`` made: the sweep was refused after all."""
        self.release()
        if self.created_file:
            self.path.unlink(missing_ok=True)
        if self.created_folder:
            try:
                self.path.parent.rmdir()
            except OSError:
                pass


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "it has just started"
