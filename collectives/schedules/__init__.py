"""The schedule stage: the row format (rows.py, its column map), the algorithms as data,
the hierarchy's compositions, templates scaled to every count, the tuning table, and the
topology that gives a schedule its (node, rail) grid.
"""
