"""The ExecuTorch backend: a ``.pte`` program from a torch source, with a JSON sidecar.

- ``backend.py``: the registered ``Backend`` (its ONNX route is a refusal: ExecuTorch programs
  are built from torch sources only), the runner, provenance and writing.
- ``direct.py``: ``convert_from_torch`` / ``check_from_torch``, the direct route (torch.export ->
  edge dialect -> XNNPACK partition, portable kernels for the rest -> ``.pte``).
- ``runner.py``: ExecuTorch's Python runtime as a parity runner.
- ``pte.py``: the file's header (checked before the runtime sees a file: a garbage ``.pte``
  aborts the process) and the sidecar.

Nothing here imports torch or executorch at module import.
"""
