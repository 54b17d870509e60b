"""`doctor serve`: the daemon. It runs the one doctor cycle (doctor.cycle.run_cycle) on an interval and when
Alertmanager's alerts arrive, and serves the state, the actions and its own metrics over HTTP."""
