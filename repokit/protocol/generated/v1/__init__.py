"""Generated protobuf modules of the legacy v1 API (package nvidia.inferenceserver)."""
