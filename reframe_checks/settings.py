"""ReFrame configuration for running the pccl-bench check on one host (a laptop or CI machine).

    reframe -C reframe_checks/settings.py -c reframe_checks/pccl_bench_check.py -r

One system ``local`` with one partition ``default`` (local scheduler and launcher: the check's
pccl-bench starts its own mpiexec). Performance logs go to ``<perflogdir>/local/default/
PcclBenchSweep.log`` (``--perflogdir``, default ``./perflogs``), one line per run with every
performance variable, its value, unit, reference and thresholds. On a cluster, add the site's
system to its own ReFrame configuration instead and set the check's ``launcher`` to srun.
"""

site_configuration = {
    "systems": [{
        "name": "local",
        "descr": "one host: pccl-bench launches its ranks with mpiexec",
        "hostnames": [".*"],
        "modules_system": "nomod",
        "partitions": [{
            "name": "default",
            "scheduler": "local",
            "launcher": "local",
            "environs": ["builtin"],
        }],
    }],
    "environments": [{"name": "builtin", "cc": "cc", "cxx": "", "ftn": ""}],
    "logging": [{
        "handlers": [{"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"}],
        "handlers_perflog": [{
            "type": "filelog",
            "prefix": "%(check_system)s/%(check_partition)s",
            "level": "info",
            "format": "%(check_job_completion_time)s|%(check_result)s|%(check_name)s|%(check_#ALL)s",
            "format_perfvars": ("%(check_perf_var)s=%(check_perf_value)s|%(check_perf_unit)s|"
                                "ref=%(check_perf_ref)s|%(check_perf_lower_thres)s|%(check_perf_upper_thres)s|"),
            "ignore_keys": ["check_executable_opts", "check_postrun_cmds", "check_prerun_cmds", "check_variables"],
            "append": True,
        }],
    }],
}
