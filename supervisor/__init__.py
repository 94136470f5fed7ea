"""jobsup.supervisor: the arbiter that forks, reaps and restarts workers."""
