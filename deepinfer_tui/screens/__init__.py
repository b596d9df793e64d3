"""Screens pushed over the debugger: help, the add-request and rollback forms, the guide."""
