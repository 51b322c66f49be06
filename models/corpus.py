"""The model lab's corpus: the Python standard library's own `*.py` sources.

Present on every machine that runs Python, so builds need no download. Licence: PSF License
Agreement version 2 (`LICENSE.txt` in the same folder). Skipped: test suites (`test/`, `tests/`,
`idle_test/`), `site-packages/`, and two folders of generated tables that read nothing like code
(`encodings/` codec maps, `pydoc_data/` help text).

The held-out split is a pure function of each file's path relative to the stdlib root, so it is
the same on every machine with the same Python version.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

SKIPPED_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "encodings", "pydoc_data",
                          "__pycache__"})
LICENCE = "PSF License Agreement version 2 (Python Software Foundation License)"


def _path_fraction(rel_path: str, salt: str) -> float:
    """Uniform number in [0, 1) from sha256(salt + rel_path); stable across machines."""
    digest = hashlib.sha256(f"{salt}:{rel_path}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_heldout(rel_path: str, heldout_fraction: float) -> bool:
    """Whether a file (posix path relative to the stdlib root) belongs to the held-out split."""
    return _path_fraction(rel_path, "heldout") < heldout_fraction


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One corpus file: `rel_path` is posix and relative to the corpus root."""

    rel_path: str
    size_bytes: int
    heldout: bool


@dataclass(frozen=True, slots=True)
class Corpus:
    """A chosen set of source files under `root`, split into train and held-out."""

    root: Path
    files: tuple[SourceFile, ...]

    @property
    def train(self) -> tuple[SourceFile, ...]:
        return tuple(f for f in self.files if not f.heldout)

    @property
    def heldout(self) -> tuple[SourceFile, ...]:
        return tuple(f for f in self.files if f.heldout)

    def read(self, f: SourceFile) -> str:
        """Text of one file; bytes that are not UTF-8 become U+FFFD."""
        return (self.root / f.rel_path).read_text(encoding="utf-8", errors="replace")

    def digest(self) -> str:
        """sha256 hex over every file's path and bytes, in path order: the corpus identity."""
        h = hashlib.sha256()
        for f in self.files:
            h.update(f.rel_path.encode() + b"\0")
            h.update((self.root / f.rel_path).read_bytes() + b"\0")
        return h.hexdigest()

    def describe(self) -> dict:
        """Plain-JSON description for report.json: source, licence, file and byte counts."""
        return {
            "source": "Python standard library sources (*.py)",
            "root": str(self.root),
            "python_version": ".".join(map(str, sys.version_info[:3])),
            "licence": LICENCE,
            "skipped_dirs": sorted(SKIPPED_DIRS),
            "files": len(self.files),
            "bytes": sum(f.size_bytes for f in self.files),
            "train_files": len(self.train),
            "train_bytes": sum(f.size_bytes for f in self.train),
            "heldout_files": len(self.heldout),
            "heldout_bytes": sum(f.size_bytes for f in self.heldout),
            "digest_sha256": self.digest(),
        }


def stdlib_root() -> Path:
    """Folder of the running interpreter's standard library (`sysconfig.get_paths()["stdlib"]`)."""
    return Path(sysconfig.get_paths()["stdlib"])


def load_corpus(root: Path | None = None, heldout_fraction: float = 0.05,
                max_files: int | None = None) -> Corpus:
    """Finds the corpus files under `root` (default: the stdlib) and splits them.

    Args:
        root: folder to scan for `*.py`; `SKIPPED_DIRS` are skipped at any depth.
        heldout_fraction: expected fraction of files held out, in (0, 1).
        max_files: keep only this many files, chosen by a path hash (a small, stable sample
            for tests); None keeps all.

    Raises:
        ValueError: bad `heldout_fraction`, or no file (or no held-out file) was found.
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction: must be in (0, 1), got {heldout_fraction}")
    root = (root or stdlib_root()).resolve()
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if SKIPPED_DIRS.intersection(rel.parts[:-1]) or not path.is_file():
            continue
        rel_path = rel.as_posix()
        files.append(SourceFile(rel_path, path.stat().st_size, is_heldout(rel_path, heldout_fraction)))
    if max_files is not None:
        files = sorted(files, key=lambda f: _path_fraction(f.rel_path, "sample"))[:max_files]
    files.sort(key=lambda f: f.rel_path)
    corpus = Corpus(root, tuple(files))
    if not corpus.train or not corpus.heldout:
        raise ValueError(f"corpus under {root}: {len(corpus.train)} train and {len(corpus.heldout)} "
                         "held-out files; need at least one of each (raise max_files or heldout_fraction)")
    return corpus
