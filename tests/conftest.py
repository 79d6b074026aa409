"""Shared fixtures. Per-area fixtures live in each folder's own conftest."""
