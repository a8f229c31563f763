"""Is a shared store's directory on storage a pair can share safely? Read from the mount table at start.

A shared-store pair is only as safe as its file locks (node_files.py):
- on NFS version 3, locks live in a side protocol (NLM, statd): a client that crashes and never comes
  back keeps its lock until its host reboots, so the backup may wait for ever;
- on NFS without the recommended options (`sync`, `noac`, `soft`, `lookupcache=none`), a server's writes
  and the state byte may not be seen by the other in time, and a hung server blocks the broker instead
  of failing it;
- on a local disk, the backup can only be a process on the same host: the pair survives a crash of the
  broker, not of the machine.
Each finding is a warning with its own log id; nothing is refused (a test pair on one host is legitimate).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

NFS_TYPES = frozenset({"nfs", "nfs4"})
RECOMMENDED = ("sync", "noac", "soft", "lookupcache=none")  # `intr` too, which Linux ignores since 2.6.25
NETWORK_TYPES = NFS_TYPES | frozenset(
    {"cifs", "smb3", "ceph", "glusterfs", "fuse.glusterfs", "gpfs", "lustre"}
)


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    options: frozenset[str]


@dataclass(frozen=True)
class Finding:
    log_id: str
    what: str


def parse_mounts(text: str) -> list[Mount]:
    """/proc/mounts (or /etc/mtab) lines: device, mount point, type, options, ... (spaces escaped)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point = fields[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        mounts.append(Mount(point, fields[2], frozenset(fields[3].split(","))))
    return mounts


def mount_of(path: Path, mounts: list[Mount]) -> Mount | None:
    """The mount a path lives on: the longest mount point that contains it (the last one mounted there)."""
    target = str(path)
    best: Mount | None = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        inside = target == point or target.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
            best = mount
    return best


def judge(path: Path, mount: Mount | None) -> list[Finding]:
    if mount is None:
        return []
    options = mount.options
    if mount.fstype in NFS_TYPES:
        findings = []
        version = next((o.split("=", 1)[1] for o in options if o.startswith(("vers=", "nfsvers="))), "")
        if version.startswith("3") or (mount.fstype == "nfs" and not version):
            findings.append(
                Finding(
                    "AMQ951077",
                    f"{path} is on NFS version {version or '3'} ({mount.point}): a server that crashes and "
                    "never comes back keeps its lock until its host reboots, and the backup waits for ever; "
                    "mount it with NFS version 4",
                )
            )
        missing = [o for o in RECOMMENDED if o not in options]
        if missing:
            findings.append(
                Finding(
                    "AMQ951078",
                    f"{path} is on NFS ({mount.point}) without the options {', '.join(missing)}: the pair "
                    "may not see each other's writes in time, and a hung NFS server blocks the broker "
                    "instead of failing it (docs/ha.md, mount recommendations)",
                )
            )
        return findings
    if mount.fstype not in NETWORK_TYPES:
        return [
            Finding(
                "AMQ951079",
                f"{path} is on a local {mount.fstype} file system ({mount.point}): a shared-store backup can "
                "only run on this host; the pair survives a crash of the broker, not of the machine",
            )
        ]
    return []


def check(path: Path, mounts_file: Path = Path("/proc/self/mounts")) -> list[Finding]:
    """The findings for a shared-store directory (none when the mount table cannot be read)."""
    try:
        text = mounts_file.read_text()
    except OSError:
        return []
    real = Path(os.path.realpath(path))
    return judge(real, mount_of(real, parse_mounts(text)))
