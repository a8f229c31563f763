"""What a shared-store server says of the storage under its lock directory, read from a mount table:
NFS version 3, NFS without the recommended options, a local disk; the mount a path lives on."""

from __future__ import annotations

from pathlib import Path

from broker_core.ha.storage import check, judge, mount_of, parse_mounts

MOUNTS = """\
/dev/sda1 / ext4 rw,relatime 0 0
proc /proc proc rw,relatime 0 0
nas:/export/v3 /shared/v3 nfs rw,relatime,vers=3,rsize=1048576,hard,proto=tcp,sync,noac,lookupcache=none 0 0
nas:/export/good /shared/good nfs4 rw,sync,relatime,vers=4.2,soft,noac,proto=tcp,lookupcache=none 0 0
nas:/export/loose /shared/loose nfs4 rw,relatime,vers=4.1,hard,proto=tcp 0 0
/dev/sdb1 /shared/good/local ext4 rw,relatime 0 0
nas:/export/sp /mnt/with\\040space nfs4 rw,sync,vers=4.2,soft,noac,lookupcache=none 0 0
"""


def ids(path: str) -> list[str]:
    target = Path(path)
    return [f.log_id for f in judge(target, mount_of(target, parse_mounts(MOUNTS)))]


def test_each_kind_of_storage_is_judged_by_the_mount_it_lives_on() -> None:
    assert ids("/shared/v3/broker/journal") == ["AMQ951077", "AMQ951078"]  # v3, and hard
    assert ids("/shared/good/broker/journal") == []  # NFS 4 with every recommended option
    assert ids("/shared/good/local/journal") == ["AMQ951079"]  # a local disk mounted inside it
    assert ids("/shared/goodness") == ["AMQ951079"]  # a prefix of a mount point is not inside it
    assert ids("/var/lib/amqp-mirror") == ["AMQ951079"]  # the root file system
    assert ids("/mnt/with space/journal") == []


def test_nfs_without_the_options_names_those_missing() -> None:
    target = Path("/shared/loose/journal")
    [finding] = judge(target, mount_of(target, parse_mounts(MOUNTS)))
    assert (
        finding.log_id == "AMQ951078"
        and "without the options sync, noac, soft, lookupcache=none" in finding.what
    )


def test_an_unreadable_mount_table_says_nothing(tmp_path: Path) -> None:
    assert check(tmp_path, tmp_path / "no-mounts") == []
    (tmp_path / "mounts").write_text(f"/dev/x {tmp_path} xfs rw 0 0\n")
    assert [f.log_id for f in check(tmp_path / "journal", tmp_path / "mounts")] == ["AMQ951079"]
