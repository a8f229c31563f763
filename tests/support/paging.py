"""Helpers for paging tests on brokers joined in memory (tests/support/pair.py)."""

from __future__ import annotations

from broker_core.message import MessageView, section_value
from tests.support.pair import MemoryClient, Network

LIMITED = """<address-setting match="orders">
  <max-size-bytes>{max_size}</max-size-bytes>
  <page-size-bytes>{page_size}</page-size-bytes>
  <max-read-page-messages>{read}</max-read-page-messages>
  <address-full-policy>{policy}</address-full-policy>
</address-setting>"""


def settings(max_size: int = 20_000, page_size: int = 8_000, read: int = 5, policy: str = "PAGE") -> str:
    return LIMITED.format(max_size=max_size, page_size=page_size, read=read, policy=policy)


def body_of(payload: bytes) -> str:
    view = MessageView(payload)
    for code, start, _ in view.all_sections():
        if code == 0x77:
            value = section_value(payload, start)
            assert isinstance(value, str)
            return value
    raise AssertionError("no amqp-value body")


def pages(net: Network, name: str) -> list[str]:
    directory = net.home / name / "paging"
    return sorted(p.name for p in directory.glob("page-*.page")) if directory.exists() else []


def drain(client: MemoryClient, address: str, credit: int = 7) -> list[str]:
    got: list[str] = []
    while True:
        batch = client.receive(address, credit)
        if not batch:
            return got
        got += [body_of(p) for p in batch]
