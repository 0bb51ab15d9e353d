"""The line Triton 2.51's core logs when a model instance cannot be created (its
``initialize`` failed, or a warmup sample failed on it): ``ERROR: Failed to create instance:
<message>`` at error level, before the version's ``failed to load`` line. Backends log it for
their instances' initialization, the core for warmups (and for the warmup samples its checks
refuse before any instance runs)."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def log_instance_failure(message: str) -> None:
    log.error("ERROR: Failed to create instance: %s", message)
