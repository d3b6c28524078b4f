"""The evaluation's side of serving: a server's address to a connected client that honours the
``Policy`` contract, one client per wire protocol."""
