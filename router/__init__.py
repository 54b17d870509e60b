"""router: see DESIGN.md."""
