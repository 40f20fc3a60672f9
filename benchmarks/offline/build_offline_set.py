"""Build the offline install set for the H200 (no network there) from PyPI, on any CPU machine.

    python -m benchmarks.offline.build_offline_set [--sets engine,verl] [--out .engine] [--part-mib N]
    python -m benchmarks.offline.build_offline_set --sets engine,verl,sglang --unpack /tmp/sgl-site  # read only

Reads ``offline_set.txt``: one pinned wheel per line with the set it belongs to; ``strip GLOB`` lines (files of
any wheel that the H200 path never loads: the wheel is then unpacked without them, RECORD lines included);
``split SET GLOB`` lines (files taken out of whatever wheel holds them and packed only when SET is built: an
optional large piece, such as SGLang's FA3 kernels, travels as a set of its own); ``deb NAME==VERSION SET GLOB``
lines (a shared library from a Debian package, ``apt-get download`` here, packed under ``libs/``); and ``sdist``
lines (packages PyPI has only as source, built on the device). Downloads each wheel for CPython 3.12 manylinux
x86_64 (cached in ``~/.cache/fp8spec/offline``), packs whole wheels as ``wheels/*.whl``, filtered wheels as an
installed tree under ``site/`` (sdists as ``sdists/*.tar.gz``, or, once a device build was fetched back into the
cache as ``NAME-VERSION-*.whl``, that wheel instead) into one deterministic ``offline.tar.xz``, split into parts
of at most ``--part-mib`` MiB (default: what one transfer can carry beside this working tree, ``part_mib_for``)
(``OUT/part01/offline.tar.xz.part01``, ...; one folder per part so each transfer can carry one part).
``OUT/part01/offline.sha256`` holds the checksum of the whole archive and of each part; ``install_offline.sh``
checks them on the device before it installs. ``--without NAME[==VERSION],...`` leaves wheels out (one archive
for SGLang's path alone: the engine and verl sets without vLLM and the pins the sglang set replaces).
``--unpack DIR`` instead writes the selected sets as they would be installed (wheels unzipped, filters applied)
into DIR, for reading them statically (``benchmarks/sglang/import_closure.py``).
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
import tempfile
import urllib.request
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path.home() / ".cache" / "fp8spec" / "offline"
# pip matches manylinux tags exactly: list every glibc level the H200 image (glibc 2.39) can load.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 26, 27, 28, 31, 34, 35, 38, 39)]
PLATFORMS += ["manylinux2014_x86_64", "manylinux1_x86_64", "any"]


class OfflineSet:
    """What ``offline_set.txt`` says for the selected sets."""

    def __init__(self, path: Path, sets: set[str], without: list[str] | None = None):
        self.sets = sets
        self.wheels: list[str] = []  # requirements packed in these sets
        self.all_wheels: list[str] = []  # every wheel line of the file (split globs may take files from any)
        self.strip: list[str] = []
        self.split: dict[str, list[str]] = {}  # set -> globs that travel only with that set
        self.debs: list[tuple[str, str]] = []  # (NAME==VERSION, glob of files inside the package)
        self.sdists: list[str] = []
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            if words[0] == "strip" and len(words) == 2:
                self.strip.append(words[1])
            elif words[0] == "split" and len(words) == 3:
                self.split.setdefault(words[1], []).append(words[2])
            elif words[0] == "deb" and len(words) == 4:
                if words[2] in sets:
                    self.debs.append((words[1], words[3]))
            elif words[0] == "sdist" and len(words) == 3:
                if words[2] in sets:
                    self.sdists.append(words[1])
            elif len(words) == 2 and "==" in words[0]:
                self.all_wheels.append(words[0])
                if words[1] in sets:
                    self.wheels.append(words[0])
            else:
                sys.exit(f"{path}: cannot read line {raw!r}")
        for drop in without or []:  # NAME (any version) or NAME==VERSION
            hit = [w for w in self.wheels if w == drop or w.split("==")[0].lower() == drop.lower()]
            if not hit:
                sys.exit(f"--without {drop}: no such wheel in sets {', '.join(sorted(sets))}")
            self.wheels = [w for w in self.wheels if w not in hit]

    def excluded(self) -> list[str]:
        """Globs left out of the wheels packed here: strip lines, and split lines of sets not built."""
        return self.strip + [g for s, globs in sorted(self.split.items()) if s not in self.sets for g in globs]

    def wanted_splits(self) -> list[str]:
        return [g for s, globs in sorted(self.split.items()) if s in self.sets for g in globs]


def device_built(requirement: str) -> Path | None:
    """A wheel of ``requirement`` built on the device and fetched back into the cache, if there is one."""
    name, version = requirement.split("==")
    stem = re.sub(r"[-_.]+", "_", name).lower()  # wheel file names normalise - _ . alike (PEP 427)
    found = sorted(p for p in CACHE.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-"))
    return found[0] if found else None


def download_sdist(requirement: str) -> Path:
    """The source archive from PyPI's simple index, checked against the sha256 the index gives."""
    name, version = requirement.split("==")
    stem = re.sub(r"[-_.]+", "_", name).lower()  # wheel file names normalise - _ . alike (PEP 427)
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
    stem = re.sub(r"[-_.]+", "_", name).lower()  # wheel file names normalise - _ . alike (PEP 427)
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


def wheel_members(wheel: Path, drop: list[str], only: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(kept, dropped) member names of ``wheel``: without the ``drop`` globs, or only the ``only`` globs."""
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if not n.endswith("/"))
    if only is not None:
        keep = [n for n in names if any(fnmatch.fnmatch(n, g) for g in only)]
    else:
        keep = [n for n in names if not any(fnmatch.fnmatch(n, g) for g in drop)]
    return keep, sorted(set(names) - set(keep))


def add_filtered_wheel(tar: tarfile.TarFile | None, wheel: Path, keep: list[str], gone: list[str],
                       unpack: Path | None = None) -> tuple[int, int]:
    """The wheel's ``keep`` files under site/ (its RECORD without the ``gone`` lines); or into ``unpack``."""
    kept = dropped = 0
    gone_set = set(gone)
    with zipfile.ZipFile(wheel) as zf:
        for name in gone:
            dropped += zf.getinfo(name).file_size
        for name in keep:
            data = zf.read(name)
            if name.endswith(".dist-info/RECORD"):
                lines = [ln for ln in data.decode().splitlines() if ln.split(",", 1)[0] not in gone_set]
                data = ("\n".join(lines) + "\n").encode()
            mode = 0o755 if name.endswith(".so") else 0o644
            if unpack is not None:
                target = unpack / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            else:
                assert tar is not None
                tar.addfile(_tarinfo(f"site/{name}", len(data), mode), io.BytesIO(data))
            kept += len(data)
    return kept, dropped


def download_deb(requirement: str) -> Path:
    """A Debian package from this machine's apt sources (``apt-get download NAME=VERSION``), cached."""
    name, version = requirement.split("==")
    target = CACHE / f"{name}_{version}_amd64.deb"
    if not target.exists():
        subprocess.run(["apt-get", "download", f"{name}={version}"], cwd=CACHE, check=True)
        found = sorted(CACHE.glob(f"{name}_*{version.split(':')[-1]}*_amd64.deb"))
        if not found:
            sys.exit(f"apt-get download {name}={version} gave no .deb in {CACHE}")
        found[0].rename(target)
    return target


def deb_files(deb: Path, glob: str) -> list[tuple[str, bytes]]:
    """(basename, bytes) of the files of ``deb`` matching ``glob`` (symlinks resolved inside the package)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        root = Path(tmp)
        out = []
        for p in sorted(root.rglob("*")):
            rel = str(p.relative_to(root))
            if fnmatch.fnmatch(rel, glob) and p.is_file():
                out.append((p.name, p.resolve().read_bytes()))
        if not out:
            sys.exit(f"{deb.name}: no file matches {glob}")
        return out


def pack(tar: tarfile.TarFile | None, chosen: OfflineSet, unpack: Path | None) -> tuple[int, int]:
    """Every wheel, filtered wheel, split piece and library of the chosen sets, in a fixed order."""
    drop, wanted = chosen.excluded(), chosen.wanted_splits()
    for req in sorted(chosen.wheels):
        path = download(req)
        keep, gone = wheel_members(path, drop)
        if gone or unpack is not None:
            kept, dropped = add_filtered_wheel(tar, path, keep, gone, unpack)
            if gone:
                print(f"{path.name}: kept {kept / 2**20:.0f} MiB, stripped {dropped / 2**20:.0f} MiB")
        else:
            assert tar is not None
            data = path.read_bytes()
            tar.addfile(_tarinfo(f"wheels/{path.name}", len(data)), io.BytesIO(data))
    for req in sorted(set(chosen.all_wheels) - set(chosen.wheels)):
        if not wanted:
            break
        path = download(req)
        keep, _ = wheel_members(path, [], only=wanted)
        if keep:
            kept, _ = add_filtered_wheel(tar, path, keep, [], unpack)
            print(f"{path.name}: {kept / 2**20:.0f} MiB of split files ({', '.join(keep)})")
    for req, glob in sorted(chosen.debs):
        for name, data in deb_files(download_deb(req), glob):
            if unpack is not None:
                (unpack / ".libs").mkdir(parents=True, exist_ok=True)
                (unpack / ".libs" / name).write_bytes(data)
            else:
                assert tar is not None
                tar.addfile(_tarinfo(f"libs/{name}", len(data), 0o755), io.BytesIO(data))
            print(f"{req}: {name} ({len(data)} bytes)")
    if unpack is None:
        assert tar is not None
        for req in sorted(chosen.sdists):
            built = device_built(req)
            path = built or download_sdist(req)
            data = path.read_bytes()
            tar.addfile(_tarinfo(f"{'wheels' if built else 'sdists'}/{path.name}", len(data)), io.BytesIO(data))
            print(f"{req}: {'device-built wheel ' if built else 'sdist '}{path.name}")
    return len(chosen.wheels), len(chosen.sdists)


CARRY_LIMIT_MIB = 64  # a transfer to the GPU machine carries the working tree plus one part, 64 MiB in all
CARRY_HEADROOM_MIB = 4  # room for a small carried path beside the part (.rl/bundles: under 1 MiB)
MAX_PART_MIB = 48


def tree_bytes(repo: Path) -> int:
    """The bytes a transfer sends besides the part: tracked files and untracked ones git does not
    ignore (`git ls-files -co --exclude-standard`)."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=repo, check=True,
                           capture_output=True).stdout.split(b"\0")
    return sum((repo / n.decode()).stat().st_size for n in names if n and (repo / n.decode()).is_file())


def part_mib_for(tree: int) -> int:
    """The largest part (MiB) a call carries beside a tree of ``tree`` bytes. The tree grows with every committed
    result: at 21 MiB, 48 MiB parts made every transfer too large."""
    room = CARRY_LIMIT_MIB - CARRY_HEADROOM_MIB - -(-tree // (1 << 20))
    if room < 8:
        raise SystemExit(f"build_offline_set: the working tree is {tree / 2**20:.1f} MiB; a transfer carries "
                         f"{CARRY_LIMIT_MIB} MiB in all, too little room for a part")
    return min(room, MAX_PART_MIB)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="engine,verl", help="comma list of sets from offline_set.txt")
    ap.add_argument("--out", default=".engine", type=Path)
    ap.add_argument("--part-mib", type=int, help="default: what a call carries beside this working tree")
    ap.add_argument("--without", default="", help="comma list of NAME or NAME==VERSION left out of the sets")
    ap.add_argument("--unpack", type=Path, help="write the sets' installed files here instead (no archive)")
    args = ap.parse_args()
    chosen = OfflineSet(HERE / "offline_set.txt", set(args.sets.split(",")), [w for w in args.without.split(",") if w])
    CACHE.mkdir(parents=True, exist_ok=True)
    if args.unpack:
        if args.unpack.exists():
            shutil.rmtree(args.unpack)
        args.unpack.mkdir(parents=True)
        n_wheels, _ = pack(None, chosen, args.unpack)
        print(f"{n_wheels} wheels of {args.sets} unpacked into {args.unpack}")
        return 0
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    archive = args.out / "offline.tar.xz"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        n_wheels, n_sdists = pack(tar, chosen, None)
    archive.write_bytes(lzma.compress(raw.getvalue(), preset=6))
    blob = archive.read_bytes()
    lines = [f"{hashlib.sha256(blob).hexdigest()}  offline.tar.xz"]
    part_mib = args.part_mib or part_mib_for(tree_bytes(HERE.parent.parent))
    step = part_mib << 20
    for i in range(0, len(blob), step):
        part = f"offline.tar.xz.part{i // step + 1:02d}"
        folder = args.out / f"part{i // step + 1:02d}"
        folder.mkdir()
        (folder / part).write_bytes(blob[i:i + step])
        lines.append(f"{hashlib.sha256(blob[i:i + step]).hexdigest()}  {part}")
    (args.out / "part01" / "offline.sha256").write_text("\n".join(lines) + "\n", encoding="utf-8")
    archive.unlink()
    print(f"{len(blob) / 2**20:.1f} MiB in {len(lines) - 1} parts of <= {part_mib} MiB under {args.out}/part*/ "
          f"({n_wheels} wheels, {n_sdists} source packages); checksums in {args.out}/part01/offline.sha256")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
