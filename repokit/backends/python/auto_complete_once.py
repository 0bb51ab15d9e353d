"""Run one python model's ``auto_complete_config`` in a process of its own, as the python
backend's first instance runs it at load, and exit: ``python -m ... RESULT_FILE`` with
``{"model_file", "args"}`` (the stub's AUTO_COMPLETE payload) as JSON on stdin.

``repokit validate --python-auto-complete`` starts it, so that model code never runs inside
the validating process. The result file gets ``["OK", {"config": json | null}]`` or
``["ERROR", message]``, the stub's own reply (and its messages: Triton's texts). The model may
print to stdout; the result goes to the file for that reason. Log lines of ``pb_utils.Logger``
go to stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

from repokit.backends.python import pb_utils
from repokit.backends.python.child_link import ChildLink
from repokit.backends.python.stub import Instance


def main(argv: list[str]) -> int:
    result_file = Path(argv[1])
    payload: dict[str, Any] = json.loads(sys.stdin.read())
    sys.modules["triton_python_backend_utils"] = pb_utils
    sys.argv[:] = [""]  # as the stub: Triton embeds Python with no arguments
    instance = Instance(cast(ChildLink, None))  # no server to talk to: logs go to stderr
    status, body = instance.auto_complete(payload)
    result_file.write_text(json.dumps([status, body]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
