"""Crash-test scenarios: ``tether crashtest examples.NAME:scenario`` from the repository root."""
