"""Request tracing as Triton 2.51 does it (``--trace-config``, the trace extension).

* :mod:`.options`: the startup settings from ``--trace-config`` and the deprecated flags;
* :mod:`.setting`: one trace setting (level, rate, count, log frequency, file, mode) with its
  sampling counters and the traces it collected, and the protocol's setting updates;
* :mod:`.manager`: the global and per-model settings (Triton's fallback rules), sampling;
* :mod:`.trace`: one sampled trace: its timestamps and tensors as the request path records them;
* :mod:`.trace_file`: Triton's JSON trace file and its ``log_frequency`` rotation;
* :mod:`.otel`: OpenTelemetry mode, spans exported over OTLP/HTTP (imported only in that mode).
"""
