"""Documentation tests: what the README and the guides tell a reader to run must run."""
