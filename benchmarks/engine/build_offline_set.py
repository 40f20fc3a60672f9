"""Build the offline install set for the H200 (no network there) from PyPI, on any CPU machine.

    python benchmarks/engine/build_offline_set.py [--sets engine,verl] [--out .engine] [--part-mib 48]

Reads ``offline_set.txt`` (one pinned wheel per line with the set it belongs to, plus ``strip`` lines: parts of
the vLLM wheel that offline inference on sm90 never loads, and ``sdist`` lines: packages PyPI has only as source,
built on the device), downloads each wheel for CPython 3.12 manylinux x86_64 (cached in
``~/.cache/fp8spec/offline``), unpacks vLLM without the stripped parts, and packs the rest as ``wheels/*.whl``
(sdists as ``sdists/*.tar.gz``, or, once a device build was fetched back into the cache as
``NAME-VERSION-*.whl``, that wheel instead) into one deterministic ``offline.tar.xz``, split into parts of at
most ``--part-mib`` MiB
(``OUT/part01/offline.tar.xz.part01``, ...; one folder per part so each device call can carry one part).
``OUT/part01/offline.sha256`` holds the checksum of the whole archive and of each part; ``install_offline.sh``
checks them on the device before it installs.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "fp8spec" / "offline"
# pip matches manylinux tags exactly: list every glibc level the H200 image (glibc 2.39) can load.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 26, 27, 28, 31, 34, 35, 38, 39)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux1_x86_64", "any"]


def read_set(path: Path, sets: set[str]) -> tuple[list[str], list[str], list[str]]:
    wheels, strip, sdists = [], [], []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] == "strip":
            strip.append(words[1])
        elif words[0] == "sdist" and len(words) == 3:
            if words[2] in sets:
                sdists.append(words[1])
        elif len(words) == 2 and words[1] in sets:
            wheels.append(words[0])
        elif len(words) != 2:
            sys.exit(f"{path}: cannot read line {raw!r}")
    return wheels, strip, sdists


def device_built(requirement: str) -> Path | None:
    """A wheel of ``requirement`` built on the device and fetched back into the cache, if there is one."""
    name, version = requirement.split("==")
    stem = name.replace("-", "_").lower()
    found = sorted(p for p in CACHE.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-"))
    return found[0] if found else None


def download_sdist(requirement: str) -> Path:
    """The source archive from PyPI's simple index, checked against the sha256 the index gives."""
    name, version = requirement.split("==")
    stem = name.replace("-", "_").lower()
    target = CACHE / f"{stem}-{version}.tar.gz"
    page = urllib.request.urlopen(f"https://pypi.org/simple/{name}/", timeout=60).read().decode()
    links = re.findall(rf'href="([^"]*/{stem}-{re.escape(version)}\.tar\.gz)#sha256=([0-9a-f]{{64}})"', page)
    if not links:
        sys.exit(f"no sdist of {requirement} on PyPI's simple index")
    url, sha = links[0]
    if not target.exists() or hashlib.sha256(target.read_bytes()).hexdigest() != sha:
        data = urllib.request.urlopen(url, timeout=300).read()
        if hashlib.sha256(data).hexdigest() != sha:
            sys.exit(f"sha256 of {url} differs from the index")
        target.write_bytes(data)
    return target


def download(requirement: str) -> Path:
    name, version = requirement.split("==")
    stem = name.replace("-", "_").lower()
    found = [p for p in CACHE.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(CACHE), requirement]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    if subprocess.run(cmd).returncode != 0:
        # A few pure-Python pins exist only as sdists (antlr4-python3-runtime 4.9.3): build their wheel here.
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(CACHE), requirement],
                       check=True)
    found = [p for p in CACHE.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
    if len(found) != 1 or ("-none-any" not in found[0].name and "manylinux" not in found[0].name):
        sys.exit(f"download of {requirement} gave {found}")
    return found[0]


def _tarinfo(name: str, size: int, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uid, info.gid = size, mode, 0, 0, 0
    info.uname = info.gname = ""
    return info


def add_stripped_vllm(tar: tarfile.TarFile, wheel: Path, strip: list[str]) -> tuple[int, int]:
    """Add the vLLM wheel's files under site/, minus ``strip`` globs (and their RECORD lines)."""
    kept = dropped = 0
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(zf.namelist())
        gone = {n for n in names if any(fnmatch.fnmatch(n, g) for g in strip)}
        for name in names:
            if name.endswith("/"):
                continue
            if name in gone:
                dropped += zf.getinfo(name).file_size
                continue
            data = zf.read(name)
            if name.endswith(".dist-info/RECORD"):
                lines = [ln for ln in data.decode().splitlines() if ln.split(",", 1)[0] not in gone]
                data = ("\n".join(lines) + "\n").encode()
            mode = 0o755 if name.endswith(".so") else 0o644
            tar.addfile(_tarinfo(f"site/{name}", len(data), mode), io.BytesIO(data))
            kept += len(data)
    return kept, dropped


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="engine,verl", help="comma list of sets from offline_set.txt")
    ap.add_argument("--out", default=".engine", type=Path)
    ap.add_argument("--part-mib", default=48, type=int)
    args = ap.parse_args()
    wheels, strip, sdists = read_set(HERE / "offline_set.txt", set(args.sets.split(",")))
    CACHE.mkdir(parents=True, exist_ok=True)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    archive = args.out / "offline.tar.xz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for req in sorted(wheels):
            path = download(req)
            if req.startswith("vllm=="):
                kept, dropped = add_stripped_vllm(tar, path, strip)
                print(f"{path.name}: kept {kept / 2**20:.0f} MiB, stripped {dropped / 2**20:.0f} MiB")
            else:
                data = path.read_bytes()
                tar.addfile(_tarinfo(f"wheels/{path.name}", len(data)), io.BytesIO(data))
        for req in sorted(sdists):
            built = device_built(req)
            path = built or download_sdist(req)
            data = path.read_bytes()
            tar.addfile(_tarinfo(f"{'wheels' if built else 'sdists'}/{path.name}", len(data)), io.BytesIO(data))
            print(f"{req}: {'device-built wheel ' if built else 'sdist '}{path.name}")
    archive.write_bytes(lzma.compress(raw.getvalue(), preset=6))
    blob = archive.read_bytes()
    lines = [f"{hashlib.sha256(blob).hexdigest()}  offline.tar.xz"]
    step = args.part_mib << 20
    for i in range(0, len(blob), step):
        part = f"offline.tar.xz.part{i // step + 1:02d}"
        folder = args.out / f"part{i // step + 1:02d}"
        folder.mkdir()
        (folder / part).write_bytes(blob[i:i + step])
        lines.append(f"{hashlib.sha256(blob[i:i + step]).hexdigest()}  {part}")
    (args.out / "part01" / "offline.sha256").write_text("\n".join(lines) + "\n", encoding="utf-8")
    archive.unlink()
    print(f"{len(blob) / 2**20:.1f} MiB in {len(lines) - 1} parts under {args.out}/part*/ "
          f"({len(wheels)} wheels, {len(sdists)} source packages); checksums in {args.out}/part01/offline.sha256")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
