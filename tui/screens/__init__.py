"""Screens of the doctor TUI."""
