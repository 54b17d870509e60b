"""sim: see DESIGN.md."""
