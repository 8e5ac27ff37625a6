"""Pack the CUDA xgboost wheel small enough to carry to a lent GPU machine (helper of ``xgboost_device``).

Run: ``python -m benchmarks._xgboost_device_pack WHEEL OUT.tar.xz [--arch 90]``.

The full ``xgboost`` 3.2.0 wheel is 132 MB (``libxgboost.so`` 237 MB, 147 MB of it the CUDA fat binary:
SASS for sm_50/60/70/80/90/100/120 and PTX for sm_120), over the device tool's 64 MiB carry limit, and its
fat binaries are already compressed. So this zeroes the payload of every fat-binary entry except the SASS
(ELF) for ``--arch`` and xz-compresses the unpacked wheel: 24 MB for sm_90 (H100/H200). The entry headers
are kept, so the CUDA runtime still picks the sm_90 ELF on an sm_90 GPU (SASS for other majors and PTX for a
newer arch are never selected there); on any other GPU the result is unusable. Fat-binary layout (as
parsed here): a 16-byte header (magic 0xBA55ED50, u16 version, u16 header size, u64 payload size) followed
by entries, each with u16 kind (1 PTX, 2 ELF), u16, u32 header size, u64 payload size, and the arch as a
u32 at offset 28. Extract on the device with ``tarfile`` into a folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import io
import struct
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path

MAGIC = 0xBA55ED50
ELF = 2


def fatbin_section(lib: Path) -> tuple[int, int]:
    """File offset and size of ``.nv_fatbin`` (from ``readelf``)."""
    out = subprocess.run(["readelf", "-S", "-W", str(lib)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if ".nv_fatbin" in line:
            parts = line.split("]", 1)[1].split()
            return int(parts[3], 16), int(parts[4], 16)
    raise ValueError(f"{lib} has no .nv_fatbin section")


def prune(data: bytearray, offset: int, size: int, arch: int) -> tuple[int, int]:
    """Zero every entry payload except ELF for ``arch``, in place; returns (bytes kept, bytes zeroed)."""
    pos, end, kept, zeroed = offset, offset + size, 0, 0
    while pos < end:
        magic, _, hsz, fsz = struct.unpack_from("<IHHQ", data, pos)
        if magic != MAGIC:  # alignment padding between blobs
            pos += 8
            continue
        p, q = pos + hsz, pos + hsz + fsz
        while p < q:
            kind, _, ehsz, psize = struct.unpack_from("<HHIQ", data, p)
            entry_arch = struct.unpack_from("<I", data, p + 28)[0]
            if kind == ELF and entry_arch == arch:
                kept += psize
            else:
                data[p + ehsz : p + ehsz + psize] = bytes(psize)
                zeroed += psize
            p += ehsz + psize
        pos = q
    if kept == 0:
        raise ValueError(f"no ELF entry for sm_{arch} in the fat binary")
    return kept, zeroed


def pack(wheel: Path, out: Path, arch: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        zipfile.ZipFile(wheel).extractall(root)
        lib = root / "xgboost" / "lib" / "libxgboost.so"
        data = bytearray(lib.read_bytes())
        kept, zeroed = prune(data, *fatbin_section(lib), arch)
        lib.write_bytes(bytes(data))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz", preset=6) as tar:
            for path in sorted(root.iterdir()):
                tar.add(path, arcname=path.name)
        out.write_bytes(buf.getvalue())
    print(
        f"kept {kept / 1e6:.1f} MB of sm_{arch} SASS, zeroed {zeroed / 1e6:.1f} MB;",
        f"{out}: {out.stat().st_size / 1e6:.1f} MB",
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--arch", type=int, default=90, help="SASS arch to keep (90: H100/H200)")
    args = ap.parse_args(argv)
    pack(args.wheel, args.out, args.arch)


if __name__ == "__main__":
    main()
