"""TraceManager: the global and per-model trace settings, and sampling.

Setting rules are Triton 2.51's (``TraceManager::UpdateTraceSetting``):

* a model's setting starts from the global one; the settings a model update names are the
  model's own, the others keep following the global setting (they change when it changes);
* clearing a model setting (JSON null, an empty gRPC value list) makes it follow the global
  setting again; when none is left the model simply uses the global setting;
* clearing a global setting returns it to its startup value;
* an update that leaves a setting unable to trace (rate 0, no trace file in triton mode) is
  refused with INVALID_ARG unless it turns tracing OFF.

``enabled`` is the one attribute the request path reads when tracing is off: False while no
setting has a trace level, so an untraced server pays one attribute check per request.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from repokit.core.tracing.options import TraceStartup
from repokit.core.tracing.setting import (
    OTEL_MODE,
    SETTING_KEYS,
    TRITON_MODE,
    NewSetting,
    TraceSetting,
    parse_update,
)
from repokit.core.tracing.trace import Trace
from repokit.core.tracing.trace_file import TraceFile
from repokit.errors import invalid_arg

if TYPE_CHECKING:
    from repokit.core.tracing.otel import OtelExporter

log = logging.getLogger(__name__)

_ATTRS = {
    "trace_level": "level",
    "trace_rate": "rate",
    "trace_count": "count",
    "log_frequency": "log_frequency",
}


class TraceManager:
    def __init__(self, startup: TraceStartup | None = None) -> None:
        startup = startup or TraceStartup()
        self.startup = startup
        self._files: dict[str, TraceFile] = {}
        values: dict[str, Any] = {
            "level": startup.level,
            "rate": startup.rate,
            "count": startup.count,
            "log_frequency": startup.log_frequency,
            "file": self._file(startup.file),
            "mode": startup.mode,
            "mode_settings": startup.mode_settings,
        }
        self._default = TraceSetting(**values)
        self._global = TraceSetting(**values)
        self._models: dict[str, TraceSetting] = {}
        self._following: set[str] = set()  # models with settings that follow the global one
        self._last_id = 0
        self.otel: OtelExporter | None = None
        self.enabled = bool(startup.level)

    @property
    def mode(self) -> str:
        return self.startup.mode

    def start(self) -> None:
        """Open the exporter of opentelemetry mode (raises RuntimeError when the tracing
        packages are missing)."""
        if self.startup.mode == OTEL_MODE and self.otel is None:
            from repokit.core.tracing.otel import OtelExporter

            self.otel = OtelExporter(self.startup)

    def stop(self) -> None:
        """Write what was collected and close the trace files; flush the exporter. A trace
        that ends later (its response was still being sent, or a frontend worker's last
        timestamps arrive after this) is written at once, into the closed file."""
        for setting in (self._global, *self._models.values()):
            setting.retired = True
            setting.flush()
        for file in self._files.values():
            file.close()
        if self.otel is not None:
            self.otel.shutdown()
            self.otel = None

    def _file(self, name: str) -> TraceFile:
        file = self._files.get(name)
        if file is None:
            file = self._files[name] = TraceFile(name)
        return file

    # --- the trace extension -------------------------------------------------------------
    def settings(self, model: str = "") -> dict[str, str | list[str]]:
        """The global setting (``model`` ""), or the one ``model``'s requests are traced with."""
        return self._models.get(model, self._global).to_response()

    def update(
        self, model: str, changes: dict[str, list[str] | None]
    ) -> dict[str, str | list[str]]:
        """Apply the protocol's changes (``{name: values}``, None/[] clears) to the global
        setting (``model`` "") or a model's; the resulting setting."""
        new = parse_update(changes)
        self._update(model, new)
        if not model:  # models following the global setting follow this update
            for name in sorted(self._following):
                self._update(name, NewSetting())
        self.enabled = bool(self._global.level) or any(s.level for s in self._models.values())
        return self.settings(model)

    def _update(self, model: str, new: NewSetting) -> None:
        current = self._models.get(model) if model else self._global
        fallback = self._global if model else self._default
        values = {attr: getattr(fallback, attr) for attr in _ATTRS.values()}
        specified: set[str] = set()
        for key in SETTING_KEYS:
            attr = _ATTRS[key]
            value = getattr(new, attr)
            if key in new.clear:
                continue
            if value is not None:
                values[attr] = value
                specified.add(key)
            elif current is not None and key in current.specified:
                values[attr] = getattr(current, attr)
                specified.add(key)
        if model:
            if not specified:  # nothing of its own left: the model uses the global setting
                self._following.discard(model)
                old = self._models.pop(model, None)
                if old is not None:
                    self._retire(old)
                return
            self._following.add(model)  # the trace file always follows the global setting
        setting = TraceSetting(
            **values,
            file=fallback.file,
            mode=fallback.mode,
            mode_settings=fallback.mode_settings,
            specified=frozenset(specified),
        )
        if not setting.valid and setting.level:
            raise invalid_arg(f"Attempting to set invalid trace setting :{setting.invalid_reason}")
        if model:
            self._models[model] = setting
        else:
            self._global = setting
        if current is not None:
            self._retire(current)

    @staticmethod
    def _retire(setting: TraceSetting) -> None:
        """A replaced setting writes what it collected; traces still running under it write
        theirs when they finish."""
        setting.retired = True
        setting.flush()

    # --- the request path ----------------------------------------------------------------
    def new_id(self) -> int:
        self._last_id += 1
        return self._last_id

    def sample(self, model: str, traceparent: str | None = None) -> Trace | None:
        """A trace for this request of ``model``, or None (every ``rate``-th request is
        traced; in opentelemetry mode a request with a valid ``traceparent`` always is)."""
        setting = self._models.get(model, self._global)
        context = None
        if traceparent and setting.mode == OTEL_MODE and setting.level and self.otel is not None:
            context = self.otel.extract(traceparent.strip())
        if not setting.sample(force=context is not None):
            return None
        trace = Trace(setting, self.new_id(), self, otel_context=context)
        trace.model_name = model  # the model the request names, until it reaches one
        return trace

    def finished(self, trace: Trace) -> None:
        """A root trace is done: written (triton mode) or exported. A request refused before
        it reached a model leaves no trace, as in Triton."""
        if not trace.started:
            return
        setting = trace.setting
        if setting.mode == TRITON_MODE:
            objects = trace.objects()
            for child in trace.spawned:
                if child.started:  # a child refused before it reached a model writes nothing
                    objects.extend(child.objects())
            setting.collect(objects)
        elif self.otel is not None:
            try:
                self.otel.export(trace)
            except Exception:  # a tracing failure must never fail the request
                log.exception("exporting a trace failed")
