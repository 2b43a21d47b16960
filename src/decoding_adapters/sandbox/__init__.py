"""Running untrusted programs: a throw-away process tree with CPU, memory, process and network limits."""
