"""Shipped calibration data: profile tables, fitted calibrations (``calibration_<gpu>.json``) and the
reference tables they are built from (``reference/``, with SOURCES.md). A package so that its files ship as
package data. Rebuild with ``python -m dcpsim.cost_models.data.build_defaults``."""
