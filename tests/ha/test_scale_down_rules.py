"""Scale-down's pure decisions: which member is chosen (its group, its node id, the connectors' order),
the stable scale-down id a rerun sends again, and the message as it travels (its delivery annotation
added, everything else kept byte for byte, and taken off again by the member)."""

from __future__ import annotations

from broker_core.amqp.codec import Symbol, encode
from broker_core.ha.scale_down import (
    SCALE_DOWN_ID,
    Member,
    choose_target,
    scale_down_id,
    with_scale_down_id,
)
from broker_core.message import DELIVERY_ANNOTATIONS, Header, MessageView, build_message

OWN = "11111111-1111-1111-1111-111111111111"


def member(node: str, group: str | None, port: int) -> Member:
    return Member(node, group, "127.0.0.1", port)


def test_the_first_active_member_of_the_group_is_chosen_in_the_connectors_order() -> None:
    other_group, ours, ours_too = member("a", "g2", 1), member("b", "g1", 2), member("c", "g1", 3)
    assert choose_target([other_group, ours, ours_too], OWN, "g1") == ours
    assert choose_target([None, ours_too, ours], OWN, "g1") == ours_too  # the first did not answer
    assert choose_target([other_group], OWN, "g1") is None
    assert choose_target([member("d", None, 4)], OWN, "g1") is None  # a member without a group


def test_without_a_group_any_active_member_but_itself_is_chosen() -> None:
    itself, other = member(OWN, None, 1), member("b", "g2", 2)
    assert choose_target([itself, other], OWN, None) == other
    assert choose_target([itself], OWN, None) is None


def test_the_scale_down_id_is_stable_per_server_and_message() -> None:
    assert scale_down_id(OWN, 7) == scale_down_id(OWN, 7)
    ids = {scale_down_id(OWN, 7), scale_down_id(OWN, 8), scale_down_id("22222222", 7)}
    assert len(ids) == 3 and all(len(i) <= 32 for i in ids)  # fits a delivery tag, if ever one carries it


def test_the_id_travels_as_a_delivery_annotation_and_the_rest_of_the_message_is_kept() -> None:
    built = build_message(
        "body",
        durable=True,
        application_properties={"_AMQ_DUPL_ID": "x", "i": 1},
        message_annotations={"x-opt-note": "kept"},
    )
    message = MessageView(built).with_header(Header(durable=True, delivery_count=2))
    sent = with_scale_down_id(message, scale_down_id(OWN, 9))
    view = MessageView(sent)
    assert view.section_map(DELIVERY_ANNOTATIONS) == {SCALE_DOWN_ID: scale_down_id(OWN, 9)}
    assert view.header.delivery_count == 2
    assert view.without_delivery_annotations() == message  # what the member stores: the message as it was
    # a last hop's own delivery annotations are replaced, not forwarded
    previous = message[: MessageView(message).header_end] + b"\x00\x53\x71" + encode({Symbol("hop"): 1})
    previous += message[MessageView(message).header_end :]
    again = MessageView(with_scale_down_id(previous, b"id"))
    assert again.section_map(DELIVERY_ANNOTATIONS) == {SCALE_DOWN_ID: b"id"}
