"""Packaging: the CUDA sources live at the top level in `cuda_src/` and ship inside the package as
`cirq_quasarq/cuda_src`, so a non-editable install finds the kernels too."""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["cirq_quasarq", "cirq_quasarq.*"]) + ["cirq_quasarq.cuda_src"],
    package_dir={"cirq_quasarq.cuda_src": "cuda_src"},
    package_data={"cirq_quasarq.cuda_src": ["*.cu", "*.cuh", "*.cpp"]},
)
