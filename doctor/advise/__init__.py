"""`doctor advise`: the engine's workload from its own histograms, a sim twin fitted to it, and settings
searched on the twin (issue 18). Errors of this room derive from `AdviseError`."""


class AdviseError(Exception):
    """Advice could not be given (bad input, nothing readable); the message says what is wrong."""
