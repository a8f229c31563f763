"""Offline DR reconciliation of two data centres' journals on Spark."""
