# The timing loop's declarations (cython_ext/timing.pyx): the modes, why a loop stopped, and the
# structs its nogil parts share. The rows carry the reasons' names (timing.pyx STOP_NAMES,
# WARMUP_NAMES), never these numbers.
from cython_ext.clock cimport ClockModel


cdef enum:
    # the most ops timed in turns (the arms of one cell; timing.pyx _Ops holds them)
    MAX_OPS = 4


cdef enum Mode:
    # how each timed call starts (timing.pyx MODE_CODES: its name in collectives.timing_plan.MODES)
    SYNC = 0
    PIPELINED = 1
    WINDOW = 2


cdef enum Stop:
    # why the timed loop stopped
    STOP_PRECISION = 0  # the 95% interval of every op's median within +-target_ci
    STOP_BUDGET = 1     # the time budget spent
    STOP_ITERS = 2      # iters calls attempted
    STOP_FIXED = 3      # no adaptive stop and no warm-up until stable: the count was fixed


cdef enum Warm:
    # why the warm-up stopped
    WARM_FIXED = 0      # the fixed warm-up only (max_warmup 0)
    WARM_STABLE = 1     # two warm-up batches' medians agreed within warm_tol (for every op)
    WARM_MAX = 2        # max_warmup iterations run
    WARM_BUDGET = 3     # the time budget spent


cdef struct Starts:
    # how each timed call of a batch begins
    Mode mode
    ClockModel *clock     # NULL: no common clock, no skew measured (sync and pipelined only)
    double first          # window: when the batch's first window opens (common time)
    double window         # window: the length of each call's window (s)
    double tolerance      # window: a call that began later than this after its window opened missed it
    double lead           # window: from the decision to the first window (the broadcast's time)
    double clock_error    # the clocks' synchronisation error bound (s)
    double initial        # window: the first length of the windows (they grow to at most 16 times it)


cdef struct Plan:
    # the rules of one cell's loop
    int warmup, cap, lowest, max_warmup
    double budget_s, target_ci, warm_tol


cdef struct Outcome:
    # what one cell's loop did
    int n, warm_done, missed, attempted
    Warm warm_reason
    Stop stop_reason
    double slowest
    # the fixed warm-up's time per call, the slowest rank's (first calls included)
    double warm_call_s
