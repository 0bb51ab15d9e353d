"""repokit's own gRPC server transport: HTTP/2 (RFC 9113) and gRPC's framing over asyncio.

``--grpc-transport native`` serves the same servicers as grpc.aio (see
:mod:`repokit.frontends.grpc.server`) without grpc.aio's native layer, which took about three
quarters of the server's CPU per gRPC call (benchmarks/README.md). Modules: :mod:`.frames`
(frame layout and codes), :mod:`.headers` (HPACK decoding of request heads, response header
blocks), :mod:`.messages` (gRPC length-prefixed messages, compression), :mod:`.context` (what
a servicer sees), :mod:`.call` (one stream), :mod:`.connection` (one HTTP/2 connection),
:mod:`.server` (listening socket, handlers, graceful stop).
"""
