"""Addons."""
