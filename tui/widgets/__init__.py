"""Widgets of the doctor TUI."""
