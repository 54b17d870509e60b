"""playbooks: see DESIGN.md."""
