"""Remediation: apply the playbooks' Actions within guardrails, verify them, roll back, audit."""
