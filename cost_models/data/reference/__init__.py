"""Unmodified copies of the public reference tables (sources and licences in SOURCES.md)."""
