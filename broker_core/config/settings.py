"""`<address-settings>` and `<security-settings>`, both keyed by a match expression."""

from __future__ import annotations

from typing import Any

from broker_core.config.model import (
    ADDRESS_SETTING_SIZES,
    AddressSettingEntry,
    AddressSettings,
    SecuritySetting,
)
from broker_core.config.support import ADDRESS_SETTING
from broker_core.config.values import BadValue, parse_enum, split_list
from broker_core.config.xmlread import Element, Reader, converter_for, local_name
from broker_core.security.authorization import Permission

_MINIMUMS = {
    "redelivery_delay": 0,
    "message_counter_history_day_limit": 0,
    "page_max_cache_size": 0,
    "initial_queue_buffer_size": 1,
    "page_size_bytes": 1,  # a page must hold something; -1 (unlimited) makes no sense here
    "max_delivery_attempts": -1,
}


def _match(text: str) -> str:
    # Artemis (Match.verify) refuses a '#' anywhere but at the very end.
    if "#" in text and text.index("#") < len(text) - 1:
        raise BadValue(
            f"'#' before the end of match {text!r}", "'#' only as the last character, e.g. 'news.#'"
        )
    return text


def parse_address_settings(reader: Reader, section: Element) -> tuple[AddressSettingEntry, ...]:
    reader.check_attributes(section, set())
    entries: dict[str, AddressSettingEntry] = {}
    for element in reader.children(section):
        if local_name(element) != "address-setting":
            reader.ignore(element)
            continue
        reader.check_attributes(element, {"match"})
        match = reader.convert(element, reader.attr(element, "match", required=True), _match, "match")
        settings = _parse_address_setting(reader, element)
        if match is None:
            continue
        if match in entries:
            reader.warning(
                element,
                f"duplicate match {match!r}; this later entry replaces the earlier one",
                "each match once",
            )
        entries[match] = AddressSettingEntry(match=match, settings=settings)
    return tuple(entries.values())


def _parse_address_setting(reader: Reader, element: Element) -> AddressSettings:
    values: dict[str, Any] = {}
    for child in reader.children(element):
        field = local_name(child).replace("-", "_")
        if field not in AddressSettings.model_fields:
            reader.ignore(child)
            continue
        reader.check_attributes(child, set())
        reader.check_no_children(child)
        text = reader.text(child)
        value = reader.convert(child, text, _converter(field))
        if value is not None:
            reader.judge(child, ADDRESS_SETTING[local_name(child)], text)
            values[field] = value
    return AddressSettings(**values)


def _converter(field: str) -> Any:
    annotation = AddressSettings.model_fields[field].annotation
    return converter_for(annotation, size=field in ADDRESS_SETTING_SIZES, minimum=_MINIMUMS.get(field))


def parse_security_settings(reader: Reader, section: Element) -> tuple[SecuritySetting, ...]:
    reader.check_attributes(section, set())
    settings: dict[str, SecuritySetting] = {}
    for element in reader.children(section):
        if local_name(element) != "security-setting":
            reader.ignore(element)
            continue
        reader.check_attributes(element, {"match"})
        match = reader.convert(element, reader.attr(element, "match", required=True), _match, "match")
        permissions = _parse_permissions(reader, element)
        if match is None:
            continue
        if match in settings:
            reader.warning(
                element,
                f"duplicate match {match!r}; this later entry replaces the earlier one",
                "each match once",
            )
        settings[match] = SecuritySetting(match=match, permissions=permissions)
    return tuple(settings.values())


def _parse_permissions(reader: Reader, element: Element) -> dict[Permission, frozenset[str]]:
    permissions: dict[Permission, frozenset[str]] = {}
    for child in reader.children(element):
        if local_name(child) != "permission":
            reader.ignore(child)
            continue
        reader.check_attributes(child, {"type", "roles"})
        kind = reader.attr(child, "type", required=True)
        roles = reader.attr(child, "roles", required=True)
        permission = reader.convert(child, kind, _permission, "type")
        if permission is not None and roles is not None:
            permissions[permission] = permissions.get(permission, frozenset()) | frozenset(split_list(roles))
    return permissions


def _permission(text: str) -> Permission:
    for member in Permission:
        if member.value == text.strip():
            return member
    try:  # Artemis spells them in camelCase; accept other cases but report the exact choices
        return parse_enum(text, Permission)
    except BadValue:
        raise BadValue(
            f"unknown permission type {text!r}", "one of " + ", ".join(p.value for p in Permission)
        ) from None
