"""Policy serving: one model shared by many episodes over websockets, batched across episodes.

Imported only when a remote policy or ``--vla-serve`` is used, so plain pytest runs never load
``websockets`` or ``msgpack``.
"""
