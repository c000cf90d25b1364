"""Demos on simulated hardware."""
