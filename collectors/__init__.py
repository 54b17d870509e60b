"""collectors: see DESIGN.md."""
