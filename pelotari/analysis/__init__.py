"""Throughput trend analysis of bench results in PySpark."""
