"""Sleeps 2 ms per execute and returns the batch size it saw (a Triton python-backend model)."""

import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.002)
        batch = sum(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().shape[0] for r in requests)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            size = np.full((x.shape[0], 1), batch, dtype=np.int32)
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("BATCH_SIZE", size)]
                )
            )
        return responses
