"""How a stage runs on this machine: the threads a job may use, the lanes that run several
stages at once, the one lock, and the guards a stage checks before it writes anything."""
