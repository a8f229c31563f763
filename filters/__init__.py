"""Address filters: mirror prefix filters and address-match wildcards."""

from filters.address_filter import AddressFilter
from filters.wildcard import (
    DEFAULT_SYNTAX,
    AddressMatcher,
    WildcardSyntax,
    best_matches,
    compare_specificity,
    matcher_for,
    most_specific,
)

__all__ = [
    "DEFAULT_SYNTAX",
    "AddressFilter",
    "AddressMatcher",
    "WildcardSyntax",
    "best_matches",
    "compare_specificity",
    "matcher_for",
    "most_specific",
]
