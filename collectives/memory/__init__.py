"""Where buffers live: the context protocol (context.py: HOST), the host and CuPy backends
(backends.py), a GPU job's context (device_context.py) and how MPI reaches device memory
(gpu_aware.py).
"""
