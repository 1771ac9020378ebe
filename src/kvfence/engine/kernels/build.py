"""Compile a kernel's C++ source once per machine into ``$KVFENCE_HOME/kernels/`` and load it.

The shared library's name carries a hash of everything that shapes the binary (source, flags,
compiler version, CPU architecture), so an edited source or another compiler builds afresh and a
stale build is never loaded. Builds write to a private temporary file and are renamed into place,
so concurrent processes (test workers, several servers) never load a half-written library.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from kvfence.engine.config import kvfence_home

__all__ = ["KernelBuildError", "build_and_load", "kernel_cache_dir"]

# A compile takes 10-40 s on an idle 2-core machine; on a machine at load 15 one was seen near 120 s.
# Past the limit the engine runs without the kernels (slower, same answers): give a busy CI room.
_COMPILE_TIMEOUT_S = 300


class KernelBuildError(RuntimeError):
    """No compiler, a failed compile, or a library that cannot be loaded."""


def kernel_cache_dir() -> Path:
    """``$KVFENCE_KERNEL_DIR`` when set, else ``$KVFENCE_HOME/kernels``."""
    env = os.environ.get("KVFENCE_KERNEL_DIR")
    return Path(env) if env else kvfence_home() / "kernels"


def find_compiler() -> str | None:
    """The C++ compiler to use: ``$CXX`` when set, else the first of g++, c++, clang++ on PATH."""
    env = os.environ.get("CXX")
    if env:
        return shutil.which(env)
    for name in ("g++", "c++", "clang++"):
        path = shutil.which(name)
        if path is not None:
            return path
    return None


def build_and_load(source: Path, flags: list[str]) -> tuple[ctypes.CDLL, Path]:
    """Compile ``source`` with ``flags`` (cached) and load it; raises :class:`KernelBuildError`."""
    compiler = find_compiler()
    if compiler is None:
        raise KernelBuildError("no C++ compiler found (set $CXX, or install g++)")
    try:
        text = source.read_bytes()
    except OSError as exc:
        raise KernelBuildError(f"cannot read kernel source {source}: {exc}") from exc
    version = _compiler_version(compiler)
    headers = [h.read_bytes() for h in sorted(source.parent.glob("*.h"))]  # the kernels' shared headers
    digest = hashlib.sha256(
        b"\0".join([text, *headers, " ".join(flags).encode(), version.encode(), platform.machine().encode()])
    ).hexdigest()[:16]
    out_dir = kernel_cache_dir()
    target = out_dir / f"{source.stem}-{digest}.so"
    if not target.is_file():
        _compile(compiler, source, flags, out_dir, target)
    try:
        return ctypes.CDLL(str(target)), target
    except OSError as exc:
        raise KernelBuildError(f"cannot load {target}: {exc}") from exc


def _compiler_version(compiler: str) -> str:
    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelBuildError(f"cannot run {compiler}: {exc}") from exc
    return done.stdout.strip()


def _compile(compiler: str, source: Path, flags: list[str], out_dir: Path, target: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=".so", dir=out_dir)
        os.close(fd)
    except OSError as exc:
        raise KernelBuildError(f"cannot write to the kernel cache {out_dir}: {exc}") from exc
    tmp = Path(tmp_name)
    try:
        cmd = [compiler, *flags, "-shared", "-fPIC", "-o", str(tmp), str(source)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise KernelBuildError(f"{' '.join(cmd)}: {exc}") from exc
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-2000:]
            raise KernelBuildError(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{tail}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
