"""Reading an Artemis journal export without Java or Spark: a recorded export of Artemis 2.40
(``data/artemis-2.40-export.xml``: `artemis data exp` of a broker that was the mirror target of ours and
took messages of its own; the messages of the second part sent by proton with every property section),
its rows, and the AMQP messages a repair rebuilds from it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from proton import Message, symbol

from spark_dr.artemis_export import (
    DEDUP,
    Exported,
    ExportError,
    NotRebuilt,
    export_rows,
    infer_node_id,
    is_export,
    message_bytes,
    read_export,
)
from spark_dr.cli import export_main
from spark_dr.inputs import InputError, check_side
from spark_dr.rows import COLUMN_NAMES

RECORDED = Path(__file__).parent / "data" / "artemis-2.40-export.xml"
OURS = "127d0b22-dbbb-49fd-b6c2-71ce4d501602"  # the node id of our broker, the origin of two messages


def rows(path: Path = RECORDED, node: str = "ARTEMIS") -> list[dict[str, object]]:
    return [dict(zip(COLUMN_NAMES, r, strict=True)) for r in export_rows(path, node)]


def messages() -> dict[int, Exported]:
    return {m.id: m for m in read_export(RECORDED) if isinstance(m, Exported)}


def decoded(message: Exported) -> Message:
    m = Message()
    m.decode(message_bytes(message))
    return m


def test_a_mirrored_message_keeps_its_origin_and_a_local_one_takes_the_node_id() -> None:
    sends = [r for r in rows() if r["event"] == "send"]
    assert len(sends) == 9
    mirrored = [r for r in sends if r["via_mirror"]]
    assert [(r["identity_broker"], r["identity_id"]) for r in mirrored] == [(OURS, 7), (OURS, 8)]
    assert all(r["origin_broker_id"] == OURS for r in mirrored)
    local = [r for r in sends if not r["via_mirror"]]
    assert all(r["identity_broker"] == "ARTEMIS" and r["identity_id"] == r["message_id"] for r in local)
    assert {r["address"] for r in sends} == {"orders"} and all(r["queues"] == ["orders"] for r in sends)
    assert all(r["digest"] is None and r["digest64"] is None for r in sends), "no payload comparison"
    assert [r["offset"] for r in sends] == list(range(9))


def test_the_dedup_mark_is_the_highest_mirrored_id_held() -> None:
    marks = [r for r in rows() if r["event"] == "meta"]
    assert [(r["meta_key"], r["meta_value"]) for r in marks] == [(DEDUP + OURS, "8")]


def test_bindings_become_address_and_queue_rows() -> None:
    created = [(r["event"], r["address"], r["queue"]) for r in rows() if r["event"] != "send"]
    assert ("queue_create", "orders", "orders") in created
    assert ("queue_create", "$ACTIVEMQ_ARTEMIS_MIRROR_back", "$ACTIVEMQ_ARTEMIS_MIRROR_back") in created
    assert ("address_create", "activemq.notifications", None) in created


def test_a_message_waiting_for_the_mirror_is_addressed_to_its_client_queue(tmp_path: Path) -> None:
    text = RECORDED.read_text().replace(
        '<queue name="orders"/>', '<queue name="$ACTIVEMQ_ARTEMIS_MIRROR_back"/><queue name="orders"/>', 1
    )
    (tmp_path / "x.xml").write_text(text)
    first = next(r for r in rows(tmp_path / "x.xml") if r["event"] == "send")
    assert first["address"] == "orders"
    assert first["queues"] == ["$ACTIVEMQ_ARTEMIS_MIRROR_back", "orders"]


def test_a_copy_our_repair_sent_to_artemis_keeps_the_identity_it_was_stamped_with(tmp_path: Path) -> None:
    name = "JMS_AMQP_MA_x-opt-amqp-mirror-repair-origin"  # how Artemis keeps a message annotation
    stamp = f'<property name="{name}" value="dc1:42" type="simple-string"/>'
    text = RECORDED.read_text().replace("<properties>", "<properties>" + stamp, 1)
    (tmp_path / "x.xml").write_text(text)
    first = next(r for r in rows(tmp_path / "x.xml") if r["event"] == "send")
    assert (first["identity_broker"], first["identity_id"], first["repaired"]) == ("dc1", 42, True)


def test_a_message_is_rebuilt_as_the_client_sent_it() -> None:
    m = decoded(messages()[21])  # proton: every properties field, application properties, a string body
    assert m.body == "hello" and m.durable and m.priority == 7
    assert (m.id, m.subject, m.reply_to, m.correlation_id, m.content_type, m.group_id) == (
        "m-1", "subj", "replies", "c1", "text/plain", "g"
    )  # fmt: skip
    assert m.properties == {"k": 1, "s": "v"}, "Artemis's own properties are not the client's"
    assert m.expiry_time == pytest.approx(messages()[21].expiration / 1000), "its absolute expiry time"
    assert 0 < m.ttl <= 3600, "and the time it had left to live (at least 1 ms)"


def test_bodies_data_none_and_annotations() -> None:
    got = messages()
    data = decoded(got[22])
    assert bytes(data.body) == b"\x00\x01binary"
    assert decoded(got[25]).body is None
    annotated = decoded(got[27])
    assert annotated.body == "annotated" and annotated.annotations == {symbol("x-opt-foo"): "bar"}


def test_a_body_converted_to_a_core_map_or_stream_is_not_rebuilt_and_says_why() -> None:
    for mid, kind in ((23, "map"), (24, "stream")):
        with pytest.raises(NotRebuilt, match=f"core {kind} message"):
            message_bytes(messages()[mid])


def test_only_an_export_is_taken_for_one(tmp_path: Path) -> None:
    assert is_export(RECORDED) and check_side(str(RECORDED)) == RECORDED
    other = tmp_path / "other.xml"
    other.write_text("<?xml version='1.0'?><configuration/>")
    assert not is_export(other)
    with pytest.raises(InputError, match="neither a Parquet file nor an Artemis export"):
        check_side(str(other))


def test_journal_export_converts_an_artemis_export_given_its_node_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "a.parquet"
    args = argparse.Namespace(directory=str(RECORDED), out=str(out), node_id=None, quiet=True)
    with pytest.raises(SystemExit) as exited:
        export_main(args)
    assert exited.value.code == 2 and "give its broker's --node-id" in capsys.readouterr().err
    args.node_id = "ARTEMIS"
    assert export_main(args) == 0
    table = pq.read_table(out)
    assert table.num_rows == len(rows()) and set(table.column("node_id").to_pylist()) == {"ARTEMIS"}


@pytest.mark.parametrize("where", ["mid-message", "after a message"])
def test_an_export_cut_short_is_one_line_naming_the_file_and_line_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """Cut mid-message as by a disk that filled while Artemis wrote it; after a whole message as Artemis's
    own tool leaves it when it stops half way (a NullPointerException on a journal killed mid-write)."""
    text = RECORDED.read_text()
    end = text.index("</messages>")
    cut = tmp_path / "cut.xml"
    last_whole = text.rindex("</message>", 0, end) + len("</message>")
    cut.write_text(text[: end - 200] if where == "mid-message" else text[:last_whole])
    with pytest.raises(ExportError, match=r"cut\.xml: line \d+: not a whole Artemis export.*start the data"):
        list(export_rows(cut, "ARTEMIS"))
    args = argparse.Namespace(directory=str(cut), out=str(tmp_path / "a.parquet"), node_id="A", quiet=True)
    with pytest.raises(SystemExit) as exited:
        export_main(args)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "not a whole Artemis export" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "An export cut short" in err


def test_a_message_with_a_bad_number_names_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text(RECORDED.read_text().replace('<message id="41"', '<message id="forty-one"', 1))
    line = next(n for n, text in enumerate(bad.read_text().splitlines(), 1) if "forty-one" in text)
    with pytest.raises(ExportError, match=rf"bad\.xml: line {line}: message: .*forty-one.*expected whole"):
        list(export_rows(bad, "ARTEMIS"))


def test_a_message_that_does_not_read_is_not_rebuilt_and_says_why() -> None:
    short = messages()[21]
    short.body_text = "AQAAAP9oAA=="  # a string that says 255 bytes, in a body of 7
    with pytest.raises(NotRebuilt, match="message 21 does not read as Artemis writes one: a text body of 2"):
        message_bytes(short)
    bad = messages()[21]
    bad.properties["k"] = ("long", "one")
    with pytest.raises(NotRebuilt, match="message 21 does not read as Artemis writes one: invalid literal"):
        message_bytes(bad)


@pytest.mark.parametrize("origins", [["artemis-node"], ["artemis-node", "a-third-broker"]])
def test_the_node_id_is_the_one_origin_the_other_side_mirrored_from(
    tmp_path: Path, origins: list[str]
) -> None:
    """From our journal (only its meta records decoded) and from its Parquet export; with a second
    origin it is not guessed."""
    from broker_core.journal import Journal, load_or_create_node_id
    from broker_core.journal.records import MetaRecord, QueueAdded
    from broker_core.vocabulary import ANYCAST
    from spark_dr.export import export_journal

    own = load_or_create_node_id(tmp_path / "j")
    with Journal(tmp_path / "j", fsync=False) as j:
        j.open()
        j.append(QueueAdded(1, "q", "q", ANYCAST))
        for n, origin in enumerate([*origins, own]):  # its own id among them is never the answer
            j.append(MetaRecord(DEDUP + origin, str(n + 5).encode()))
        j.flush()
    expected = "artemis-node" if len(origins) == 1 else None
    assert infer_node_id(tmp_path / "j") == expected
    pytest.importorskip("pyarrow")
    export_journal(tmp_path / "j", tmp_path / "j.parquet")
    assert infer_node_id(tmp_path / "j.parquet") == expected
