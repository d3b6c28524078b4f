"""The server's side of serving: the policy server, one handler per wire protocol written against
``core.ServerCore``, the episode table and the policy thread, and the ways a server is started."""
