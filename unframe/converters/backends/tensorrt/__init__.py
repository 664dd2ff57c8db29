"""TensorRT backend: pre-flight against the parser's support table, graph preparation passes,
in-graph precision lowering, engine build and (on a GPU) a runner. Importing this package does
not import TensorRT."""
