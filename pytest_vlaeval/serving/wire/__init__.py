"""The wire formats, shared by clients and handlers: what a message is, with no network in it."""
