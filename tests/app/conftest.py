"""Debugger tests: the Textual app driven by real keys (Pilot), screen snapshots, and the
Textual-free core it acts through (session, scenario, replay, export). Shared helpers are in
`helpers.py`."""
