"""Pieces of the PyTorch frontend: source detection and loading, inputs, exporters, runner.

Every module here imports torch inside its functions only, so that importing the frontend (and
``import unframe``) never pulls torch in.
"""
