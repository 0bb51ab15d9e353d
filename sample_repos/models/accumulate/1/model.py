"""Running sum per sequence, keyed by the CORRID control tensor (a Triton python-backend model)."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()
            key = int(corrid.reshape(-1)[0])
            if int(start.reshape(-1)[0]) == 1:
                self.totals[key] = 0
            self.totals[key] = self.totals.get(key, 0) + int(value.reshape(-1)[0])
            out = np.full(value.shape, self.totals[key], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", out)]))
        return responses
