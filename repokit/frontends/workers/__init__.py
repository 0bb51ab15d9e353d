"""``repokit serve --workers N``: frontend processes over one scheduling process.

The scheduling process (today's server) keeps the InferenceService, the model instances, the
batchers, statistics and ``/metrics``; each of N frontend workers binds the HTTP and gRPC ports
with ``SO_REUSEPORT`` and runs the same frontends over a :class:`.client.ServiceClient`, which
forwards the core's operations over a Unix socketpair (:mod:`.messages`, :mod:`.link`) to a
:class:`.host.ServiceHost` in the scheduling process. :mod:`.pool` starts, restarts and stops
the workers; :mod:`.process` is a worker's entry point. The design: README, "Serving on every
core".
"""
