"""A real small filesystem for the batch tests' disk-full and read-only cases: a tmpfs of a few
KiB mounted on a test's folder (`mount -t tmpfs -o size=...`; needs root or CAP_SYS_ADMIN, else
the test is skipped, saying why). Writes past its size fail with ENOSPC; `-o ro` gives EROFS."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


@contextlib.contextmanager
def tmpfs(where: Path, size_kib: int, read_only: bool = False) -> Iterator[Path]:
    """`where` (created) with a tmpfs of `size_kib` KiB mounted on it, unmounted afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    options = f"size={size_kib}k" + (",ro" if read_only else "")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
