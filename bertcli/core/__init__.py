"""Layer 0: errors, console, atomic files, locks, paths, the machine."""
