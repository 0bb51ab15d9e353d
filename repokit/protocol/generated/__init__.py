"""Generated protobuf modules (see repokit.protocol.codegen). Do not edit by hand."""
