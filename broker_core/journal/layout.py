"""Which files of a journal directory to replay, in which order, and which are left-overs.

A directory holds plain segments (``segment-<seq>.jnl``), at most one *complete* compacted generation
(``compact-<gen>-<seq>.jnl`` files plus the marker ``compact-<gen>.done``) and possibly debris of an
interrupted compaction. The marker is the commit point of a compaction: it is written (tmp, fsync,
rename, directory fsync) only after every file of its generation is durable, so

* the newest generation with a valid marker is the base state; it replaces every plain segment with
  ``seq <= covers_through`` and every older generation (those are *obsolete*, safe to delete);
* generation files without a marker are *incomplete* (a crash mid-compaction) and must be ignored;
* plain segments with ``seq > covers_through`` replay after the generation, in sequence order.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from broker_core.journal.errors import JournalFormatError
from broker_core.journal.segment import compacted_name, parse_compacted_name, parse_plain_name

MARKER_MAGIC = b"AMQMCMPL"
MARKER_VERSION = 1
# magic, version, reserved (0), generation, covers_through, first_seq, last_seq, crc32 of the rest
MARKER = struct.Struct("<8sHHIQQQI")
_MARKER_SUFFIX = ".done"


def marker_name(generation: int) -> str:
    return f"compact-{generation:08d}{_MARKER_SUFFIX}"


@dataclass(frozen=True, slots=True)
class Marker:
    generation: int
    covers_through: int  # highest plain segment sequence the generation replaces
    first_seq: int  # the generation's files have sequences first_seq..last_seq, all present
    last_seq: int


def pack_marker(marker: Marker) -> bytes:
    body = MARKER.pack(
        MARKER_MAGIC,
        MARKER_VERSION,
        0,
        marker.generation,
        marker.covers_through,
        marker.first_seq,
        marker.last_seq,
        0,
    )[:-4]
    return body + struct.pack("<I", zlib.crc32(body))


def unpack_marker(data: bytes) -> Marker | None:
    """The marker, or None when the bytes are not a valid marker."""
    if len(data) != MARKER.size:
        return None
    magic, version, _reserved, gen, covers, first, last, crc = MARKER.unpack(data)
    if magic != MARKER_MAGIC or zlib.crc32(data[:-4]) != crc:
        return None
    if version != MARKER_VERSION:
        raise JournalFormatError(f"compaction marker version {version}; this build reads {MARKER_VERSION}")
    return Marker(gen, covers, first, last)


@dataclass(slots=True)
class Layout:
    marker: Marker | None
    replay: list[Path]  # in replay order
    obsolete: list[Path] = field(default_factory=list)  # superseded by the chosen generation
    incomplete: list[Path] = field(default_factory=list)  # debris of an interrupted compaction
    next_seq: int = 1  # higher than any sequence ever seen here: sequences are never reused
    next_generation: int = 1


def plan(directory: Path) -> Layout:
    """Classify the files of ``directory`` (read-only)."""
    plain: dict[int, Path] = {}
    compacted: dict[tuple[int, int], Path] = {}
    markers: dict[int, Path] = {}
    tmp: list[Path] = []
    for path in directory.iterdir():
        name = path.name
        if (seq := parse_plain_name(name)) is not None:
            plain[seq] = path
        elif (gen_seq := parse_compacted_name(name)) is not None:
            compacted[gen_seq] = path
        elif name.startswith("compact-") and name.endswith(_MARKER_SUFFIX):
            markers[int(name[len("compact-") : -len(_MARKER_SUFFIX)])] = path
        elif name.startswith("compact-") and name.endswith(".tmp"):
            tmp.append(path)
    chosen = _newest_valid_marker(markers)
    layout = Layout(chosen, [], incomplete=sorted(tmp))
    seqs = [*plain, *(seq for _, seq in compacted), 0]
    gens = [*markers, *(gen for gen, _ in compacted), 0]
    if chosen is not None:
        seqs += [chosen.covers_through, chosen.last_seq]
        _check_generation_files(directory, chosen, compacted)
    layout.next_seq = max(seqs) + 1
    layout.next_generation = max(gens) + 1
    _classify(layout, chosen, plain, compacted, markers)
    return layout


def _newest_valid_marker(markers: dict[int, Path]) -> Marker | None:
    for gen in sorted(markers, reverse=True):
        marker = unpack_marker(markers[gen].read_bytes())
        if marker is not None and marker.generation == gen:
            return marker
    return None


def _check_generation_files(directory: Path, marker: Marker, compacted: dict[tuple[int, int], Path]) -> None:
    for seq in range(marker.first_seq, marker.last_seq + 1):
        if (marker.generation, seq) not in compacted:
            missing = directory / compacted_name(marker.generation, seq)
            raise JournalFormatError(f"compaction marker {marker} names a missing file {missing}")


def _classify(
    layout: Layout,
    chosen: Marker | None,
    plain: dict[int, Path],
    compacted: dict[tuple[int, int], Path],
    markers: dict[int, Path],
) -> None:
    chosen_gen = chosen.generation if chosen else 0
    covers = chosen.covers_through if chosen else 0
    for (gen, _seq), path in sorted(compacted.items()):
        if gen == chosen_gen:
            layout.replay.append(path)
        elif gen < chosen_gen:
            layout.obsolete.append(path)
        else:
            layout.incomplete.append(path)
    for seq, path in sorted(plain.items()):
        (layout.replay if seq > covers else layout.obsolete).append(path)
    for gen, path in sorted(markers.items()):
        if gen < chosen_gen:
            layout.obsolete.append(path)
        elif gen > chosen_gen:
            layout.incomplete.append(path)  # a marker that failed validation
