"""Batch work over a model zoo: read a manifest or discover a folder, upgrade every model to an
opset in isolated worker processes (locally or on a Dask cluster), journal progress so a killed
run resumes, and report per model. Frameworks and dask are imported only where used."""
