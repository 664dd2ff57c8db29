"""The OpenVINO backend (issue 37): ONNX -> OpenVINO IR, and direct routes from torch and TF."""
