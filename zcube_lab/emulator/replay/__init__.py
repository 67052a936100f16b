"""Replaying a recording in a lab: the per-host agents and the driver (issue 45)."""
