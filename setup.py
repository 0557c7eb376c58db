"""Build the Cython hot paths against the MPI that mpi4py will load.

The compiler wrapper is, in order: $MPICC; the ``mpicc`` beside this Python
(the PyPI MPICH wheel in a virtual environment); ``mpicc`` on PATH.
"""

import os
import shutil
import sys
from pathlib import Path

import mpi4py
from Cython.Build import cythonize
from setuptools import Extension, setup


def find_mpicc() -> str:
    if os.environ.get("MPICC"):
        return os.environ["MPICC"]
    beside_python = Path(sys.prefix) / "bin" / "mpicc"
    if beside_python.exists():
        return str(beside_python)
    on_path = shutil.which("mpicc")
    if on_path:
        return on_path
    sys.exit(
        "pccl-bench: no MPI compiler wrapper found. Set MPICC (for example MPICC=cc on Cray), "
        "or install the embedded MPICH with `pip install mpich` first."
    )


mpicc = find_mpicc()
# setuptools uses CC for both compiling and linking the shared object.
os.environ["CC"] = mpicc
os.environ["LDSHARED"] = f"{mpicc} -shared"

MODULES = ["core", "reduce", "native", "executor", "timing"]
extensions = [
    Extension(
        f"cython_ext.{name}",
        [f"cython_ext/{name}.pyx"],
        include_dirs=[mpi4py.get_include(), "cython_ext"],
        extra_compile_args=["-O3", "-fno-strict-aliasing"],
    )
    for name in MODULES
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    )
)
