"""Derive broker.xml's vocabulary from Apache ActiveMQ Artemis's configuration schema.

    .venv/bin/python scripts/artemis_schema.py [--xsd artemis-configuration.xsd]

Writes broker_core/config/artemis_schema.json: for each element name of the schema, the element names
allowed in it and the attribute names it takes. The config loader tells a typo (a name the schema does not
have, answered with "did you mean ...?") from an element Artemis has and this broker does not implement yet.
Without --xsd, the schema is read from the artemis-server jar of ARTEMIS_VERSION, fetched from Maven
Central with `mvn dependency:get` (Maven's local repository caches it). Facts only: names and where they
may appear, no documentation text.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

from lxml import etree

ARTEMIS_VERSION = "2.40.0"
REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "broker_core" / "config" / "artemis_schema.json"
XS = "{http://www.w3.org/2001/XMLSchema}"
# artemis-server.xsd: the document root holds <core> (this schema) and <jms> (the JMS schema)
ROOT = {"configuration": ["core", "jms"]}


def schema_from_maven() -> bytes:
    artifact = f"org.apache.activemq:artemis-server:{ARTEMIS_VERSION}"
    subprocess.run(
        ["mvn", "-q", "dependency:get", f"-Dartifact={artifact}", "-Dtransitive=false"], check=True
    )
    jar = Path.home() / f".m2/repository/org/apache/activemq/artemis-server/{ARTEMIS_VERSION}"
    with zipfile.ZipFile(jar / f"artemis-server-{ARTEMIS_VERSION}.jar") as z:
        return z.read("schema/artemis-configuration.xsd")


def _local(name: str | None) -> str:
    return (name or "").split(":")[-1]


def derive(xsd: bytes) -> dict[str, dict[str, list[str]]]:
    root = etree.fromstring(xsd)
    types = {t.get("name"): t for t in root.findall(f"{XS}complexType")}
    tops = {e.get("name"): e for e in root.findall(f"{XS}element")}
    # an abstract element stands for the elements of its substitution group (discovery-type is
    # <static-connectors> or <discovery-group-ref>)
    substitutes: dict[str, list[str]] = defaultdict(list)
    for name, element in tops.items():
        if element.get("substitutionGroup"):
            substitutes[_local(element.get("substitutionGroup"))].append(name)
    children: dict[str, set[str]] = defaultdict(set)
    attributes: dict[str, set[str]] = defaultdict(set)

    def body_of(element: etree._Element) -> list[etree._Element]:
        """The content definitions of an element: its inline type, or the named type it refers to."""
        bodies = list(element.findall(f"{XS}complexType"))
        named = types.get(_local(element.get("type")))
        if named is not None:
            bodies.append(named)
        return bodies

    def scan(owner: str, body: etree._Element, seen: set[int]) -> None:
        if id(body) in seen:
            return
        seen.add(id(body))
        for node in body.iter(f"{XS}element", f"{XS}attribute", f"{XS}extension"):
            if _nested(node, body):
                continue  # inside a child element's own inline type: that child's content
            if node.tag == f"{XS}attribute":
                attributes[owner].add(node.get("name") or _local(node.get("ref")))
            elif node.tag == f"{XS}extension":
                base = types.get(_local(node.get("base")))
                if base is not None:
                    scan(owner, base, seen)
            else:
                named = node.get("name") or _local(node.get("ref"))
                for child in substitutes.get(named, [named]):
                    children[owner].add(child)
                    definition = tops.get(child) if node.get("ref") else node
                    for child_body in body_of(definition) if definition is not None else []:
                        scan(child, child_body, set())

    for name, element in tops.items():
        for body in body_of(element):
            scan(name, body, set())
    for name, allowed in ROOT.items():
        children[name].update(allowed)
    names = sorted(set(children) | set(attributes) | {c for cs in children.values() for c in cs})
    return {
        name: {"children": sorted(children.get(name, ())), "attributes": sorted(attributes.get(name, ()))}
        for name in names
    }


def _nested(node: etree._Element, body: etree._Element) -> bool:
    parent = node.getparent()
    while parent is not None and parent is not body:
        if parent.tag == f"{XS}element":
            return True
        parent = parent.getparent()
    return False


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--xsd", type=Path, help="a local artemis-configuration.xsd (default: from Maven)")
    args = parser.parse_args()
    xsd = args.xsd.read_bytes() if args.xsd else schema_from_maven()
    vocabulary = derive(xsd)
    document = {"artemis_version": ARTEMIS_VERSION, "elements": vocabulary}
    OUT.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    print(f"{OUT.relative_to(REPO)}: {len(vocabulary)} element names", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
