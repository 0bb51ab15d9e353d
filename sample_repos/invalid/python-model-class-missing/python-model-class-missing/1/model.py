import triton_python_backend_utils as pb_utils


class Model:
    def execute(self, requests):
        return []
