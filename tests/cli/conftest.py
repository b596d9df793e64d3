"""Command-line tests: every command run in-process or as a subprocess; exit codes, one-line
errors and the JSON shapes."""
