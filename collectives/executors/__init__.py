"""What runs schedule rows: the host's Cython executor (cython_ext/executor.pyx) and the device's
(device.py), a schedule cut for other transports (compose.py), and the numpy simulator of
every rank (simulate.py).
"""
