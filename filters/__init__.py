"""Address filters: mirror prefix filters and address-match wildcards."""
