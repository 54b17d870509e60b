"""Trials: the real doctor driven over sim engines (live over HTTP, or in virtual time); not shipped."""
