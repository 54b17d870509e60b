"""tui: see DESIGN.md."""
