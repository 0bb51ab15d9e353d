"""The legacy v1 API (TensorRT Inference Server, removed from Triton in 20.07).

``InferRequestHeader``/``InferResponseHeader`` over HTTP (``/api/...``, :mod:`.http`) and the
gRPC service ``nvidia.inferenceserver.GRPCService`` (:mod:`.grpc`), both thin adapters over the
same :class:`~repokit.core.service.InferenceService` as v2 (:mod:`.operations`), so models,
schedulers and statistics are shared. Protos: ``protos/v1/*.proto``.
"""
