"""Collation, stores and data sets."""
